#!/usr/bin/env bash
# The GPU preset from an empty run directory to a trained network, timed by the wall
# clock, then its weights loaded into PyTorch (load_state_dict, strict) and evaluated on
# the test set by derived_load.py. Writes OUT/fashion-seedS.json and the run in OUT/run-sS.
#   run_fashion_gpu.sh EXAPT DATA_DIR OUT [SEED] [BACKEND]
set -euo pipefail
exapt=$1 data=$2 out=$3 seed=${4:-2} backend=${5:-cuda}
here=$(cd "$(dirname "$0")" && pwd)
run=$out/run-s$seed
rm -rf "$run"
t0=$(date +%s.%N)
"$exapt" search --preset fashion --backend "$backend" --data "$data" --seed "$seed" \
    --out "$run" >"$out/fashion-s$seed.log" 2>&1
t1=$(date +%s.%N)
python3 "$here/derived_load.py" --run "$run" --data "$data" --out "$out/pytorch-s$seed.json" ||
    true
python3 - "$run" "$t0" "$t1" "$seed" "$out/pytorch-s$seed.json" >"$out/fashion-s$seed.json" <<'PY'
import json, sys
run, t0, t1, seed, check = sys.argv[1:]
header = json.loads(open(f"{run}/metrics.jsonl").readline())
train = [json.loads(l) for l in open(f"{run}/train/metrics.jsonl")]
search = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
epochs = [r for r in train if r["type"] == "epoch"]
try:
    torch_check = json.load(open(check))
except (OSError, ValueError):
    torch_check = None
print(json.dumps({
    "device": header["device"], "backend": header["backend"], "seed": int(seed),
    "wall_s": float(t1) - float(t0),
    "search_s": sum(r["seconds"] for r in search if r["type"] == "epoch"),
    "train_s": sum(r["seconds"] for r in epochs),
    "test_accuracy": epochs[-1]["valid_acc"],
    "test_accuracy_by_epoch": [r["valid_acc"] for r in epochs],
    "genotype": open(f"{run}/genotype.txt").read().strip(),
    "pytorch_check": torch_check, "config": header["config"]}, indent=1))
PY
cat "$out/fashion-s$seed.json"
