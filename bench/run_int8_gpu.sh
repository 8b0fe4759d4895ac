#!/usr/bin/env bash
# int8 on the GPU machine (docs/deploy.md), in one run: the quantized ops' suite (and the
# fused requantize's malformed nodes) on CUDA and Vulkan; DARTS_V2 and the Fashion-MNIST search's genotype
# (bench/results/fashion-s2-genotype.txt), each trained one epoch on CUDA (C=36, 20 cells,
# auxiliary head, 28x28x1), quantized on 1000 training images and evaluated in f32 and
# int8; inference speed of both on CUDA, Vulkan (NVIDIA's driver) and the 16-core CPU,
# with the batch-256 logits compared across backends; PyTorch eager and onnxruntime on
# the exported f32 model. Needs .gpu/bundle.tar.xz (scripts/gpu-bundle.sh) and .gl/ (the
# Vulkan loader) carried. Usage there: bench/run_int8_gpu.sh OUT_DIR [fresh]
# fresh: no training or accuracy, a fresh DARTS_V2 of the same size for the speed rows and
# the cross-backend logits (the int8 pass is exact, so accuracy does not move with speed).
set -uo pipefail
out=$1
fresh=${2:-}
x=/tmp/exapt-bundle
mkdir -p "$x" "$out" /tmp/dump /tmp/dump8 && tar xJf .gpu/bundle.tar.xz -C "$x"
export LD_LIBRARY_PATH=$x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
    export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
e=$x/bin/exapt
b=$x/bin/bench_inference
for be in cuda vulkan; do
    for f in family_quant qconv_rq_errors; do
        OPS_FILTER=$f $x/bin/test_ops --backend $be >"$out/ops-$f-$be.txt" 2>&1
        echo "op suite ($f) on $be: rc $? $(tail -1 "$out/ops-$f-$be.txt")"
    done
done
nets="v2 s2"
if [ "$fresh" = fresh ]; then
    nets=""
    mkdir -p /tmp/v2
    $b --backend cuda --save /tmp/v2/weights.safetensors --seconds 0.2 >/dev/null
    $e --backend cpu quantize /tmp/v2/weights.safetensors --out /tmp/v2/int8.safetensors \
        --data $x/data --images 64 >"$out/quantize-v2.txt" 2>&1
fi
for net in $nets; do
    g=DARTS_V2
    [ $net = s2 ] && g=bench/results/fashion-s2-genotype.txt
    $e --backend cuda train --genotype "$g" --epochs 1 --data $x/data --out /tmp/$net \
        >"$out/train-$net.txt" 2>"$out/train-$net.err"
    w=/tmp/$net/weights.safetensors
    $e --backend cuda quantize $w --out /tmp/$net/int8.safetensors --data $x/data \
        --images 1000 >"$out/quantize-$net.txt" 2>&1
    for p in weights int8; do
        $e --backend cuda eval /tmp/$net/$p.safetensors --data $x/data --no-tta --json \
            >"$out/eval-$net-$p.json" 2>&1
        echo "$net $p: $(grep -o '"accuracy":[^,]*' "$out/eval-$net-$p.json")"
    done
done
w=/tmp/v2/weights.safetensors
q=/tmp/v2/int8.safetensors
cp $w $q "$out/"
$e export $w --out /tmp/dump/v2.onnx
for be in cuda vulkan; do
    $b --backend $be --weights $w --dump /tmp/dump >"$out/exapt-$be.json"
    $b --backend $be --weights $q --dump /tmp/dump8 >"$out/exapt-int8-$be.json"
done
OMP_NUM_THREADS=16 $b --backend cpu --weights $w --dump /tmp/dump --profile 1 >/tmp/cpu.json
OMP_NUM_THREADS=16 $b --backend cpu --weights $q --dump /tmp/dump8 --profile 1 >/tmp/cpu8.json
grep -v inference_profile /tmp/cpu.json >"$out/exapt-cpu.json"
grep -v inference_profile /tmp/cpu8.json >"$out/exapt-int8-cpu.json"
grep inference_profile /tmp/cpu.json /tmp/cpu8.json >"$out/cpu-profile.jsonl"
for be in cuda vulkan; do
    cmp -s /tmp/dump8/logits-cpu-256.f32 /tmp/dump8/logits-$be-256.f32 &&
        echo "int8 logits on $be: bitwise those of the CPU" ||
        echo "int8 logits on $be: DIFFER from the CPU's"
done | tee "$out/int8-logits.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt"
cat "$out"/exapt-*.json
(cd bench && python3 inference_torch.py --weights $w --onnx /tmp/dump/v2.onnx --dump /tmp/dump \
    --exapt "$out"/exapt-cuda.json "$out"/exapt-vulkan.json "$out"/exapt-cpu.json \
    --threads 16 | tee "$out/inference.jsonl")
