#!/usr/bin/env bash
# exapt train's checkpoints are as crash-safe as the search's: weights, optimizer and
# position in one file (checkpoint.safetensors, the one before kept as .prev). A training
# SIGKILLed at random moments and resumed with --resume DIR alone (the configuration comes
# from the run) ends with bitwise the weights of one never interrupted; a damaged newest
# checkpoint falls back to .prev; a kill inside a checkpoint write (the slow_write shim
# stretches it) resumes from the checkpoint before; SIGTERM while the data is read ends it
# at once (nothing is written yet), and during the steps and an evaluation it is answered
# within a second (exit 130) and the resume ends as a whole run.
# Usage: train_resume.sh EXAPT_BINARY SLOW_WRITE_SO
set -euo pipefail
exapt=$1
shim=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1
args=(train --genotype DARTS_V2 --backend cpu --limit 768 --epochs 4 --batch 32 --channels 4
      --layers 2 --no-auxiliary --cutout 0 --flip --holdout 128)

"$exapt" "${args[@]}" --out "$dir/whole" >"$dir/whole.out" 2>"$dir/whole.log" ||
    fail "the whole training failed: $(tail -2 "$dir/whole.log")"
[ ! -e "$dir/whole/position" ] || fail "a separate position file was written"

# killed at random moments after its first checkpoint, resumed with --resume alone
kill_later() {
    local pid=$1
    while [ ! -f "$dir/cut/checkpoint.safetensors" ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.02
    done
    sleep "0.$((RANDOM % 6 + 1))"
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"
        wait "$pid" || true
        return 0
    fi
    wait "$pid" || true
    return 1
}
kills=0
"$exapt" "${args[@]}" --out "$dir/cut" >/dev/null 2>"$dir/cut.log" &
for round in 1 2 3 4 5; do
    if kill_later $!; then kills=$((kills + 1)); else break; fi
    "$exapt" train --resume "$dir/cut" >"$dir/cut.out" 2>>"$dir/cut.log" &
done
wait $! || fail "the resumed training failed: $(tail -3 "$dir/cut.log")"
[ "$kills" -ge 1 ] || fail "the training finished before any kill: nothing was tested"
cmp "$dir/whole/weights.safetensors" "$dir/cut/weights.safetensors" ||
    fail "weights differ after $kills kills"
acc() { grep -o "test accuracy [0-9.]*%" "$1"; }
[ "$(acc "$dir/whole.out")" = "$(acc "$dir/cut.out")" ] ||
    fail "the resumed run reports another accuracy: $(acc "$dir/cut.out")"
echo "killed $kills times: the same weights"

# a resume that tries to change the configuration is refused, in one line
rc=0
"$exapt" train --resume "$dir/cut" --channels 8 2>"$dir/refused.log" || rc=$?
[ "$rc" -ne 0 ] && grep -q -- "--channels" "$dir/refused.log" ||
    fail "--resume with --channels was not refused: $(cat "$dir/refused.log")"

# the newest checkpoint damaged: the resume says so and goes on from .prev
cp -r "$dir/whole" "$dir/damaged"
head -c 100 "$dir/whole/checkpoint.safetensors" >"$dir/damaged/checkpoint.safetensors"
rm "$dir/damaged/weights.safetensors"
"$exapt" train --resume "$dir/damaged" >"$dir/damaged.out" 2>"$dir/damaged.log" ||
    fail "no resume from .prev: $(tail -2 "$dir/damaged.log")"
grep -q "resuming the training from .*checkpoint.safetensors.prev" "$dir/damaged.log" ||
    fail "the fallback to .prev was not reported"
cmp "$dir/whole/weights.safetensors" "$dir/damaged/weights.safetensors" ||
    fail "weights differ after the fallback to .prev"

# SIGKILL inside the second checkpoint's write: the first one is what the resume loads
LD_PRELOAD=$shim EXAPT_SLOW_WRITE_US=20000 "$exapt" "${args[@]}" --out "$dir/torn" >/dev/null \
    2>"$dir/torn.log" &
pid=$!
ck=$dir/torn/checkpoint.safetensors
while [ ! -f "$ck" ] && kill -0 $pid 2>/dev/null; do sleep 0.01; done
while [ ! -f "$ck.tmp" ] && kill -0 $pid 2>/dev/null; do sleep 0.005; done
sleep 0.05
[ -f "$ck.tmp" ] || fail "no second checkpoint write to kill"
kill -9 $pid
wait $pid || true
"$exapt" train --resume "$dir/torn" >/dev/null 2>>"$dir/torn.log" ||
    fail "no resume after a kill inside a checkpoint write: $(tail -2 "$dir/torn.log")"
grep -q "resuming the training from $ck at epoch 2 " "$dir/torn.log" ||
    fail "the resume did not take the complete checkpoint: $(grep resuming "$dir/torn.log")"
cmp "$dir/whole/weights.safetensors" "$dir/torn/weights.safetensors" ||
    fail "weights differ after a kill inside a checkpoint write"
echo "SIGKILL inside a checkpoint write: resumed from the one before, the same weights"

# SIGTERM to PID once PATTERN is in LOG: answered within a second with exit 130; sets ms to
# the milliseconds the answer took
stop_when() { # stop_when LOG PATTERN PID
    local log=$1 pattern=$2 pid=$3 t0 rc=0
    while ! grep -q "$pattern" "$log" && kill -0 "$pid" 2>/dev/null; do sleep 0.01; done
    sleep 0.2
    kill -0 "$pid" 2>/dev/null || fail "the training ended before '$pattern' could be stopped"
    t0=$(date +%s%N)
    kill -TERM "$pid"
    wait "$pid" || rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    [ "$rc" -eq 130 ] || fail "SIGTERM after '$pattern': exit $rc, not 130"
    [ "$ms" -lt 1000 ] || fail "SIGTERM after '$pattern' answered after $ms ms"
}

# SIGTERM while the data is read, before anything is written: the default action, at once
"$exapt" "${args[@]}" --out "$dir/early" >/dev/null 2>&1 &
pid=$!
sleep 0.1
t0=$(date +%s%N)
kill -TERM $pid
rc=0
wait $pid || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$rc" -eq 143 ] || fail "SIGTERM while the data is read: exit $rc, not 143"
[ "$ms" -lt 1000 ] || fail "SIGTERM while the data is read answered after $ms ms"
[ ! -e "$dir/early/metrics.jsonl" ] || fail "a run stopped before its first step left a log"
echo "SIGTERM while the data is read: ended in $ms ms"

# SIGTERM among the steps: the checkpoint where it stands, and the resume ends as a whole run
"$exapt" "${args[@]}" --out "$dir/steps" >/dev/null 2>"$dir/steps.log" &
stop_when "$dir/steps.log" "step 1/20" $!
"$exapt" train --resume "$dir/steps" >/dev/null 2>>"$dir/steps.log" ||
    fail "the resume after SIGTERM among the steps failed: $(tail -2 "$dir/steps.log")"
cmp "$dir/whole/weights.safetensors" "$dir/steps/weights.safetensors" ||
    fail "weights differ after a stop among the steps"
echo "SIGTERM among the steps: answered in $ms ms"

# SIGTERM in the middle of the test evaluation (no held-out images: 10,000 test images
# after each epoch): answered within a second, exit 130, and the resume ends as a whole run
eargs=(train --genotype DARTS_V2 --backend cpu --limit 256 --epochs 2 --batch 32 --channels 8
       --layers 2 --no-auxiliary --cutout 0)
"$exapt" "${eargs[@]}" --out "$dir/ewhole" >/dev/null 2>&1 || fail "the evaluated run failed"
"$exapt" "${eargs[@]}" --out "$dir/eval" >/dev/null 2>"$dir/eval.log" &
stop_when "$dir/eval.log" "step 8/8" $!
grep -q "train epoch 1/2 done" "$dir/eval.log" && fail "the evaluation was not interrupted"
"$exapt" train --resume "$dir/eval" >/dev/null 2>>"$dir/eval.log" ||
    fail "the resume after SIGTERM failed: $(tail -2 "$dir/eval.log")"
cmp "$dir/ewhole/weights.safetensors" "$dir/eval/weights.safetensors" ||
    fail "weights differ after a stop in the evaluation"
echo "SIGTERM in the evaluation: answered in $ms ms; training resume: ok"
