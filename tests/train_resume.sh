#!/usr/bin/env bash
# exapt train's checkpoints are as crash-safe as the search's: weights, optimizer and
# position in one file (checkpoint.safetensors, the one before kept as .prev). A training
# SIGKILLed at random moments and resumed with --resume DIR alone (the configuration comes
# from the run) ends with bitwise the weights of one never interrupted; a damaged newest
# checkpoint falls back to .prev; SIGTERM during an evaluation is answered within a second
# (exit 130) and the resume evaluates again. Usage: train_resume.sh EXAPT_BINARY
set -euo pipefail
exapt=$1
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

# SIGTERM in the middle of the test evaluation (no held-out images: 10,000 test images
# after each epoch): answered within a second, exit 130, and the resume ends as a whole run
eargs=(train --genotype DARTS_V2 --backend cpu --limit 256 --epochs 2 --batch 32 --channels 8
       --layers 2 --no-auxiliary --cutout 0)
"$exapt" "${eargs[@]}" --out "$dir/ewhole" >/dev/null 2>&1 || fail "the evaluated run failed"
"$exapt" "${eargs[@]}" --out "$dir/eval" >/dev/null 2>"$dir/eval.log" &
pid=$!
while ! grep -q "step 8/8" "$dir/eval.log" && kill -0 $pid 2>/dev/null; do sleep 0.01; done
sleep 0.2
kill -0 $pid 2>/dev/null || fail "the training ended before its evaluation could be stopped"
t0=$(date +%s%N)
kill -TERM $pid
rc=0
wait $pid || rc=$?
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$rc" -eq 130 ] || fail "SIGTERM during the evaluation: exit $rc, not 130"
[ "$ms" -lt 1000 ] || fail "SIGTERM during the evaluation answered after $ms ms"
grep -q "train epoch 1/2 done" "$dir/eval.log" && fail "the evaluation was not interrupted"
"$exapt" train --resume "$dir/eval" >/dev/null 2>>"$dir/eval.log" ||
    fail "the resume after SIGTERM failed: $(tail -2 "$dir/eval.log")"
cmp "$dir/ewhole/weights.safetensors" "$dir/eval/weights.safetensors" ||
    fail "weights differ after a stop in the evaluation"
echo "SIGTERM in the evaluation: answered in $ms ms; training resume: ok"
