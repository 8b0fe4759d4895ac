#!/usr/bin/env bash
# A search that trains what it found resumes from its own record (--resume DIR alone):
# stopped at the boundary between search and training, and killed inside the training,
# it ends bitwise where a run never interrupted ends (trained weights, genotype). A
# resume that tries to change the configuration is refused, and the metrics log's header
# records the command, the version and commit, and every setting. A finished run resumed
# with a longer --epochs searches on and trains the network it then finds (the earlier
# training, of another network, is replaced).
# Usage: resume_boundary.sh EXAPT_BINARY
set -euo pipefail
exapt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1
args=(search --backend cpu --limit 256 --batch 8 --channels 4 --layers 2 --steps 2
      --epochs 2 --arch-lr 0.03 --arch-warmup 0.5 --max-param-free 1 --profile-every 0
      --train-epochs 3 --train-channels 4 --train-layers 2 --train-batch 16
      --train-limit 480 --train-auxiliary 0 --train-flip 1)
"$exapt" "${args[@]}" --out "$dir/whole" 2>"$dir/whole.log" ||
    { tail -3 "$dir/whole.log"; fail "the whole run failed"; }

# the record
python3 - "$dir/whole/metrics.jsonl" <<'PY' || fail "the header does not record the run"
import json, sys
c = json.loads(open(sys.argv[1]).readline())["config"]
assert "--train-epochs" in c["argv"] and c["command"].endswith("--out " + sys.argv[1][:-14])
assert c["commit"] and c["version"] and c["dataset"] == "fashion-mnist" and c["data"]
assert c["search"]["arch_warmup_steps"] == 8 and c["search"]["max_param_free"] == 1
assert c["train"]["epochs"] == 3 and c["train"]["flip"] is True
PY
# the guard: at most one parameter-free operation in the normal cell
normal=$(sed 's/normal_concat.*//' "$dir/whole/genotype.txt")
free=$(grep -o "pool_3x3\|skip_connect" <<<"$normal" | wc -l)
[ "$free" -le 1 ] || fail "$free parameter-free operations in $normal"

# stopped at the boundary: the search's files, no training yet
mkdir "$dir/edge"
cp "$dir/whole"/{metrics.jsonl,checkpoint.safetensors,genotype.txt,genotype.json} "$dir/edge/"
"$exapt" search --resume "$dir/edge" 2>"$dir/edge.log" ||
    { tail -3 "$dir/edge.log"; fail "the resume at the boundary failed"; }
grep -q "resuming from .* at epoch 3" "$dir/edge.log" || fail "did not resume after the search"
cmp "$dir/whole/train/weights.safetensors" "$dir/edge/train/weights.safetensors" ||
    fail "trained weights differ after a resume at the boundary"

# killed inside the training, just after its first epoch's checkpoint
"$exapt" "${args[@]}" --out "$dir/cut" 2>"$dir/cut.log" &
pid=$!
while [ ! -f "$dir/cut/train/checkpoint.safetensors" ] && kill -0 $pid 2>/dev/null; do
    sleep 0.05
done
kill -0 $pid 2>/dev/null || fail "the run ended before it could be killed in training"
kill -9 $pid
wait $pid || true
"$exapt" search --resume "$dir/cut" 2>>"$dir/cut.log" ||
    { tail -3 "$dir/cut.log"; fail "the resume inside the training failed"; }
cmp "$dir/whole/genotype.txt" "$dir/cut/genotype.txt" || fail "genotype differs"
cmp "$dir/whole/train/weights.safetensors" "$dir/cut/train/weights.safetensors" ||
    fail "trained weights differ after a kill in training"

# a resume may not change the configuration
if "$exapt" search --resume "$dir/cut" --channels 8 2>"$dir/refused.log"; then
    fail "a resume with --channels was accepted"
fi
grep -q "cannot be given with --resume" "$dir/refused.log" || fail "no clear refusal"

# a finished run searched on: its training is of the genotype found last
cp -r "$dir/whole" "$dir/more"
"$exapt" search --resume "$dir/more" --epochs 4 2>"$dir/more.log" ||
    { tail -3 "$dir/more.log"; fail "the resume with a longer --epochs failed"; }
python3 - "$dir/more" <<'PY' || fail "the training is not of the genotype found last"
import json, sys
found = json.load(open(sys.argv[1] + "/genotype.json"))
trained = json.loads(open(sys.argv[1] + "/train/metrics.jsonl").readline())["config"]["genotype"]
assert all(found[k] == trained[k] for k in ("normal", "reduce", "normal_concat", "reduce_concat"))
PY
echo "5 passed, 0 failed"
