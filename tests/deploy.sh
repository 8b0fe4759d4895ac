#!/usr/bin/env bash
# Deployment of trained weights: a small network trained for one epoch, then `exapt eval`
# gives the accuracy the training reported, `exapt predict` gives the same classes for PNG
# files of every colour type as for the IDX file they came from and scores as eval does,
# `exapt export` writes a model onnx.checker accepts, `exapt quantize` writes int8 weights
# that score within a point of the f32 ones; bad input to each is a clear error.
# Usage: deploy.sh EXAPT PNG_FROM_IDX WORKDIR (WORKDIR is left for tests/onnx_runtime.sh)
set -euo pipefail
exapt=$1 png_from_idx=$2 w=$3
data=/usr/share/datasets/fashion-mnist
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$w" && mkdir -p "$w"

"$exapt" --backend cpu train --genotype DARTS_V2 --channels 4 --layers 3 --epochs 1 \
    --limit 2000 --batch 32 --no-auxiliary --tta --out "$w/run" >"$w/train.out" 2>"$w/train.err"
trained=$(sed -n 's/^train: test accuracy \([0-9.]*\)%.*/\1/p' "$w/train.out")
[ -n "$trained" ] || fail "no accuracy from the training"

# eval: the same accuracy (with the test-time flip the run recorded), and JSON
"$exapt" --backend cpu eval "$w/run" >"$w/eval.out"
grep -q "^accuracy $trained%" "$w/eval.out" || fail "eval: $(grep accuracy "$w/eval.out"), training $trained%"
grep -q "each with its mirror image" "$w/eval.out" || fail "eval did not take the recorded --tta"
"$exapt" --backend cpu eval "$w/run/weights.safetensors" --no-tta --json >"$w/eval.json"
python3 - "$w/eval.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
m = d["confusion"]
assert d["images"] == 10000 and d["tta"] is False, d
assert sum(map(sum, m)) == 10000 and len(m) == 10, "confusion matrix"
assert abs(sum(m[i][i] for i in range(10)) / 10000 - d["accuracy"]) < 1e-12, "diagonal"
PY

# predict: PNG files of each colour type give the classes the IDX file gives
for f in gray gray16 rgb rgba palette; do
    mkdir -p "$w/$f"
    "$png_from_idx" "$data/t10k-images-idx3-ubyte.gz" 20 "$w/$f" "$f"
    "$exapt" --backend cpu predict "$w/run" "$w/$f"/*.png --top 3 --batch 7 |
        awk '{$1=""; print}' >"$w/$f.classes"
done
"$exapt" --backend cpu predict "$w/run" "$data/t10k-images-idx3-ubyte.gz" --top 3 >"$w/idx.out"
head -20 "$w/idx.out" | awk '{$1=""; print}' >"$w/idx.classes"
for f in gray gray16 rgb rgba palette; do
    cmp -s "$w/$f.classes" "$w/idx.classes" || fail "predict: $f PNG files differ from the IDX file"
done
[ "$(wc -l <"$w/idx.out")" -eq 10000 ] || fail "predict: not one line per image"
# its classes score as eval does without the flip
python3 - "$w/idx.out" "$data/t10k-labels-idx1-ubyte.gz" "$w/eval.json" <<'PY'
import gzip, json, sys
labels = gzip.open(sys.argv[2]).read()[8:]
lines = open(sys.argv[1]).read().split("\n")[:-1]
right = sum(int(l.split()[1]) == labels[i] for i, l in enumerate(lines))
want = json.load(open(sys.argv[3]))["accuracy"]
assert abs(right / len(lines) - want) < 1e-12, (right / len(lines), want)
PY
"$exapt" --backend cpu predict "$w/run" "$w/gray/00000.png" --json |
    python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); assert d["top"][0]["probability"] > 0'

# export: a model onnx.checker accepts, with its shapes inferred
"$exapt" export "$w/run" --out "$w/model.onnx" >/dev/null
/usr/bin/python3 - "$w/model.onnx" <<'PY'
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.checker.check_model(m, full_check=True)
assert m.opset_import[0].version == 13
assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
assert not any(n.op_type == "BatchNormalization" for n in m.graph.node), "a batch norm not folded"
PY

# quantize: int8 weights that score within a point of the f32 ones, and predict
"$exapt" --backend cpu quantize "$w/run" --out "$w/int8.safetensors" --images 500 >/dev/null
"$exapt" --backend cpu eval "$w/int8.safetensors" --json >"$w/eval8.json"
python3 - "$w/eval.json" "$w/eval8.json" <<'PY'
import json, sys
f32, int8 = (json.load(open(p))["accuracy"] for p in sys.argv[1:])
assert abs(int8 - f32) <= 0.01, f"int8 {int8:.4f} against f32 {f32:.4f}"
print(f"deploy: int8 {100 * int8:.2f}%, f32 {100 * f32:.2f}%")
PY
"$exapt" --backend cpu predict "$w/int8.safetensors" "$w/gray/00000.png" >"$w/predict8.out"
# a scale of 0 in the file: refused when opened
python3 - "$w/int8.safetensors" "$w/zero.safetensors" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
a, b = head["activation_scales"]["data_offsets"]
body = bytearray(raw[8 + n:])
body[a:a + 4] = b"\0\0\0\0"
open(sys.argv[2], "wb").write(raw[:8 + n] + bytes(body))
PY

# bad input: one clear line and exit 1, or 2 for a bad command line
expect() { # expect CODE PATTERN COMMAND...
    local code=$1 pattern=$2 rc=0
    shift 2
    "$@" >"$w/bad.out" 2>"$w/bad.err" || rc=$?
    [ "$rc" -eq "$code" ] || fail "$* exited $rc, not $code"
    grep -q -e "$pattern" "$w/bad.err" || fail "$*: no '$pattern' in: $(cat "$w/bad.err")"
}
head -c 60 "$w/gray/00000.png" >"$w/cut.png"
expect 1 "not a readable PNG" "$exapt" --backend cpu predict "$w/run" "$w/cut.png"
expect 1 "not an IDX file" "$exapt" --backend cpu predict "$w/run" "$w/run/metrics.jsonl"
expect 1 "no weights.safetensors" "$exapt" eval "$w/gray"
expect 1 "metrics.jsonl: header length" "$exapt" eval "$w/run/metrics.jsonl"
expect 1 "cannot\|No such" "$exapt" export "$w/run" --out /nonexistent/m.onnx
expect 2 "--top 11" "$exapt" --backend cpu predict "$w/run" "$w/cut.png" --top 11
expect 2 "which weights" "$exapt" eval
expect 2 "--out FILE is required" "$exapt" export "$w/run"
expect 1 "int8 already" "$exapt" --backend cpu quantize "$w/int8.safetensors" --out "$w/q2" --images 10
expect 1 "is int8" "$exapt" export "$w/int8.safetensors" --out "$w/q.onnx"
expect 1 "not a positive finite scale" "$exapt" --backend cpu eval "$w/zero.safetensors"
expect 2 "--out FILE is required" "$exapt" quantize "$w/run"
[ ! -e "$w/q2" ] && [ ! -e "$w/q.onnx" ] || fail "a refused command left a file"
echo "deploy: eval $trained% as trained; predict and export as expected"
