#!/usr/bin/env bash
# The inference table on the GPU machine (docs/deploy.md): DARTS_V2 (C=36, 20 cells,
# auxiliary head, 28x28x1) trained one epoch on Fashion-MNIST with exapt on CUDA, then
# exapt on CUDA, Vulkan (NVIDIA's driver) and the CPU, PyTorch eager fp32 and onnxruntime
# on the exported model, in one run. Needs .gpu/bundle.tar.xz
# (scripts/gpu-bundle.sh) and .gl/ (the Vulkan loader) carried.
# Usage there: bench/run_inference_gpu.sh OUT_DIR
set -uo pipefail
out=$1
x=/tmp/exapt-bundle
mkdir -p "$x" "$out" /tmp/dump && tar xJf .gpu/bundle.tar.xz -C "$x"
export LD_LIBRARY_PATH=$x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
b=$x/bin/bench_inference
$x/bin/exapt --backend cuda train --genotype DARTS_V2 --epochs 1 --data $x/data --out /tmp/run \
    >"$out/train.txt" 2>"$out/train.err"
tail -2 "$out/train.err"
w=/tmp/run/weights.safetensors
cp $w "$out/" # for the same timing on other machines
$x/bin/exapt export $w --out /tmp/dump/v2.onnx
$b --backend cuda --weights $w --dump /tmp/dump >"$out/exapt-cuda.json"
$b --backend vulkan --weights $w --dump /tmp/dump >"$out/exapt-vulkan.json"
OMP_NUM_THREADS=16 $b --backend cpu --weights $w --dump /tmp/dump >"$out/exapt-cpu.json"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt"
cd bench && python3 inference_torch.py --weights $w --onnx /tmp/dump/v2.onnx --dump /tmp/dump \
    --exapt "$out"/exapt-*.json --threads 16 | tee "$out/inference.jsonl"
