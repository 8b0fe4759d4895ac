#!/usr/bin/env bash
# Crash safety of checkpoints (docs/reliability.md).
# 1. A search is killed with SIGKILL many times: at random moments, and -- with the
#    slow_write shim preloaded, so a checkpoint write takes a while -- while a checkpoint
#    is being written. After every kill the resumed search must load the newest
#    checkpoint itself (a torn one would be refused and the .prev taken: that fails the
#    test), and the search ends bitwise equal to one never interrupted.
# 2. A full disk (a file-size limit, SIGXFSZ ignored so write() fails with EFBIG): the
#    checkpoint write fails, the search stops with an error naming it, the previous
#    checkpoint is intact byte for byte, no temporary file is left, and it still resumes.
# Usage: crash_safety.sh EXAPT_BINARY SLOW_WRITE_SO [KILLS]
set -euo pipefail
exapt=$1
shim=$2
kills_wanted=${3:-12}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# small, so that many kills and restarts fit in CI's minutes
args=(search --backend cpu --limit 256 --batch 8 --channels 4 --layers 2 --steps 1
      --arch-lr 0.03 --profile-every 0 --checkpoint-every 2)
ck=$dir/cut/checkpoint.safetensors
fail() { echo "FAIL: $*"; exit 1; }
# one thread: the runs compare bitwise (same thread count everywhere) and restart fast
export OMP_NUM_THREADS=1

"$exapt" "${args[@]}" --epochs 3 --out "$dir/whole" 2>"$dir/whole.log"

# exec: the background job is the search itself, so $! is its pid
slow() { LD_PRELOAD=$shim EXAPT_SLOW_WRITE_US=10000 exec "$exapt" "$@"; }

# Waits until the search has a checkpoint, then kills it: in round r odd, as soon as a
# new checkpoint write has started (plus up to 0.15 s, inside the slowed write); in round
# r even, once a newer checkpoint is complete, at a random moment up to 0.5 s later.
# Returns 1 when the search ended before the kill.
kill_round() {
    local pid=$1 r=$2 t0
    while [ ! -f "$ck" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    if [ $((r % 2)) -eq 1 ]; then
        while [ ! -f "$ck.tmp" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.005; done
        sleep "0.$(printf '%02d' $((RANDOM % 16)))"
    else
        t0=$(stat -c %i "$ck" 2>/dev/null || echo 0)
        while [ "$(stat -c %i "$ck" 2>/dev/null || echo 0)" = "$t0" ] &&
            kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
        sleep "0.$((RANDOM % 5))$((RANDOM % 10))"
    fi
    kill -0 "$pid" 2>/dev/null || { wait "$pid" || true; return 1; }
    kill -9 "$pid"
    wait "$pid" || true
    return 0
}

kills=0
in_write=0
slow "${args[@]}" --epochs 3 --out "$dir/cut" 2>"$dir/cut.0.log" &
for r in $(seq 1 "$kills_wanted"); do
    kill_round $! "$r" || break
    kills=$((kills + 1))
    [ -f "$ck.tmp" ] && in_write=$((in_write + 1))
    # the configuration comes from the run: --resume alone
    slow search --resume "$dir/cut" 2>"$dir/cut.$r.log" &
    # the resumed search must take the newest checkpoint, never fall back to .prev
    while ! grep -q "resuming from\|no usable\|error" "$dir/cut.$r.log" 2>/dev/null &&
        kill -0 $! 2>/dev/null; do sleep 0.02; done
    grep -q "resuming from $ck at" "$dir/cut.$r.log" ||
        { cat "$dir/cut.$r.log"; fail "after kill $kills the newest checkpoint did not load"; }
done
wait $! || { tail -5 "$dir/cut.$kills.log"; fail "the resumed search failed"; }
echo "killed $kills times, $in_write of them during a checkpoint write"
[ "$kills" -ge $((kills_wanted / 2)) ] || fail "only $kills kills landed"
[ "$in_write" -ge 2 ] || fail "only $in_write kills landed inside a checkpoint write"
cmp "$dir/whole/genotype.txt" "$dir/cut/genotype.txt" || fail "genotype differs"
cmp "$dir/whole/checkpoint.safetensors" "$ck" || fail "final state differs"

# ---- full disk ----
cp "$ck" "$dir/before"
limit_kb=$(($(stat -c %s "$ck") / 2048))
set +e
(
    trap '' XFSZ
    ulimit -f "$limit_kb"
    exec "$exapt" search --epochs 4 --resume "$dir/cut"
) 2>"$dir/full.log"
rc=$?
set -e
[ "$rc" -ne 0 ] || fail "the search succeeded though its checkpoint could not be written"
grep -q "checkpoint:.*File too large" "$dir/full.log" ||
    { tail -3 "$dir/full.log"; fail "no error naming the checkpoint write"; }
cmp "$dir/before" "$ck" || fail "the previous checkpoint changed"
[ ! -e "$ck.tmp" ] || fail "a temporary checkpoint was left behind"
"$exapt" search --epochs 4 --resume "$dir/cut" 2>"$dir/after.log" ||
    { tail -3 "$dir/after.log"; fail "no resume after the full disk"; }
grep -q "resuming from $ck at" "$dir/after.log" || fail "resumed from something else"
echo "full disk: the write failed with an error, the previous checkpoint stayed intact"
echo "2 passed, 0 failed"
