#!/usr/bin/env bash
# The command as ranks: `exapt search --gpus 2` (then the training of what it found) runs
# end to end with rank 0 alone writing the run, its step records carry both ranks' times,
# and a run of two ranks resumes in one process (a checkpoint holds the group's state).
# --gpus and --ranks refuse bad counts, each other's other count, and other commands.
# Usage: data_parallel_cli.sh EXAPT_BINARY
set -euo pipefail
exapt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
args=(search --backend cpu --channels 4 --layers 3 --steps 2 --batch 16 --limit 320
      --train-epochs 1 --train-limit 320 --train-channels 4 --train-layers 3 --train-batch 16
      --profile-every 0)

usage() { # the exit status 2 and the message
    local want=$1
    shift
    if "$exapt" "$@" >/dev/null 2>"$dir/err"; then fail "exapt $* ran"; fi
    "$exapt" "$@" >/dev/null 2>&1 || [ $? -eq 2 ] || fail "exapt $*: not a usage error"
    grep -q -- "$want" "$dir/err" || fail "exapt $*: $(head -1 "$dir/err")"
}
usage "--gpus needs a number of GPUs" search --gpus 0
usage "--gpus needs a number of GPUs" train --gpus=x
usage "--gpus needs a number of GPUs" search --gpus
usage "--gpus 2 and --ranks 3 disagree" --ranks 3 search --gpus 2
usage "unknown option '--gpus'" info --gpus 2

"$exapt" "${args[@]}" --gpus 2 --epochs 1 --out "$dir/run" >"$dir/out" 2>"$dir/log" ||
    fail "the two-rank search failed: $(tail -3 "$dir/log")"
for f in genotype.json genotype.txt metrics.jsonl checkpoint.safetensors train/weights.safetensors; do
    [ -s "$dir/run/$f" ] || fail "no $f in the run"
done
# one process printed the result and the progress (rank 0), not two
[ "$(grep -c '^genotype: ' "$dir/out")" -eq 1 ] || fail "the result was printed $(grep -c '^genotype: ' "$dir/out") times"
[ "$(grep -c '^search epoch 1/1 done' "$dir/log")" -eq 1 ] || fail "the epoch was reported other than once"
grep -q '"rank_step_ms":\[[0-9.e+-]*,[0-9.e+-]*\]' "$dir/run/metrics.jsonl" ||
    fail "no step record with two ranks' times"
grep -q '"rank_step_ms":\[[0-9.e+-]*,[0-9.e+-]*\]' "$dir/run/train/metrics.jsonl" ||
    fail "no training step record with two ranks' times"

# the group's checkpoint, resumed alone for a second epoch (the training ran: keep it out)
rm -rf "$dir/run/train"
"$exapt" search --resume "$dir/run" --epochs 2 --train-epochs 0 >"$dir/out2" 2>"$dir/log2" ||
    fail "the resume in one process failed: $(tail -3 "$dir/log2")"
grep -q 'resuming from .* at epoch 2 step 0' "$dir/log2" || fail "the resume did not start at epoch 2"
grep -q '^search epoch 2/2 done' "$dir/log2" || fail "the resumed epoch did not end"
if grep -q '"rank_step_ms"' <(tail -n 5 "$dir/run/metrics.jsonl"); then
    fail "one process wrote ranks' times"
fi
grep -q -- '--gpus' "$dir/run/metrics.jsonl" && fail "the run recorded --gpus"
echo "data_parallel_cli: two ranks ran the search and its training; one process resumed it"
