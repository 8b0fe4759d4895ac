#!/usr/bin/env bash
# Exported models on onnxruntime: their logits against exapt's (within 1e-4) and their
# accuracy. The model tests/deploy.sh exported, on the 10000 test images; then a cell with
# every candidate operation, at stride 1 and 2, briefly trained, on 1000.
# Usage: onnx_runtime.sh EXAPT DUMP_LOGITS NODE ORT_MODULE WORKDIR
set -euo pipefail
exapt=$1 dump=$2 node=$3 ort=$4 w=$5
data=/usr/share/datasets/fashion-mnist
check() { # check WEIGHTS MODEL COUNT
    "$dump" "$1" "$data/t10k-images-idx3-ubyte.gz" "$3" "$w/inputs.f32" "$w/logits.f32"
    "$node" "$(dirname "$0")/onnx_runtime.js" "$ort" "$2" "$w/inputs.f32" "$w/logits.f32" \
        "$data/t10k-labels-idx1-ubyte.gz" 1 28 28 10
}
check "$w/run/weights.safetensors" "$w/model.onnx" 10000

cat >"$w/every.txt" <<'G'
Genotype(normal=[('sep_conv_7x7', 0), ('conv_7x1_1x7', 1), ('avg_pool_3x3', 0), ('dil_conv_5x5', 2), ('skip_connect', 1), ('sep_conv_5x5', 3), ('max_pool_3x3', 2), ('dil_conv_3x3', 4)], normal_concat=[2, 3, 4, 5], reduce=[('skip_connect', 0), ('avg_pool_3x3', 1), ('conv_7x1_1x7', 0), ('dil_conv_3x3', 1), ('sep_conv_7x7', 1), ('max_pool_3x3', 0), ('dil_conv_5x5', 2), ('sep_conv_3x3', 0)], reduce_concat=[2, 3, 4, 5])
G
rm -rf "$w/every"
"$exapt" --backend cpu train --genotype "$w/every.txt" --channels 4 --layers 3 --epochs 1 \
    --limit 640 --batch 32 --no-auxiliary --out "$w/every" >/dev/null 2>&1
"$exapt" export "$w/every" --out "$w/every.onnx" >/dev/null
check "$w/every/weights.safetensors" "$w/every.onnx" 1000
