#!/usr/bin/env bash
# exapt's CPU inference (f32 and int8) against onnxruntime's CPU provider on the GPU
# machine's CPU at several thread counts, in one run (docs/deploy.md): a fresh DARTS_V2
# (C=36, 20 cells, 28x28x1) quantized on 64 training images, exported to ONNX, then per
# thread count bench_inference (--profile 1: time by op) on both and onnxruntime on the
# export; also the CPU op suite with and without exapt's AVX-512 kernels. Needs
# .gpu/bundle.tar.xz (scripts/gpu-bundle.sh) carried.
# Usage there: bench/run_cpu_scaling.sh OUT_DIR [THREADS ...] (default 16 8 4 2 1)
set -uo pipefail
out=$1
shift
threads=${*:-16 8 4 2 1}
x=/tmp/exapt-bundle
mkdir -p "$x" "$out" /tmp/dump /tmp/v2 && tar xJf .gpu/bundle.tar.xz -C "$x"
export LD_LIBRARY_PATH=$x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
b=$x/bin/bench_inference
w=/tmp/v2/weights.safetensors
q=/tmp/v2/int8.safetensors
for avx in 1 0; do
    EXAPT_CPU_AVX512=$avx $x/bin/test_ops --backend cpu >"$out/ops-cpu-avx512-$avx.txt" 2>&1
    echo "op suite on the cpu, EXAPT_CPU_AVX512=$avx: rc $? $(tail -1 "$out/ops-cpu-avx512-$avx.txt")"
done
$b --backend cpu --save $w --seconds 0.2 >/dev/null
$x/bin/exapt --backend cpu quantize $w --out $q --data $x/data --images 64 >"$out/quantize.txt" 2>&1
$x/bin/exapt export $w --out /tmp/dump/v2.onnx
lscpu >"$out/lscpu.txt"
for t in $threads; do
    OMP_NUM_THREADS=$t $b --backend cpu --weights $w --dump /tmp/dump --profile 1 >"$out/f32-$t.jsonl"
    OMP_NUM_THREADS=$t $b --backend cpu --weights $q --profile 1 >"$out/int8-$t.jsonl"
    (cd bench && python3 inference_torch.py --weights $w --onnx /tmp/dump/v2.onnx --dump /tmp/dump \
        --threads "$t" --seconds 2 --no-torch | grep '^{' >"$out/ort-$t.jsonl")
done
printf '%-8s %-22s %-22s %-22s\n' threads "f32 b1 ms, b256 img/s" "int8" "onnxruntime f32"
for t in $threads; do
    python3 - "$out" "$t" <<'PY'
import json, sys
out, t = sys.argv[1], sys.argv[2]
def row(path):
    for line in open(path):
        d = json.loads(line)
        if "batch1_ms" in d:
            ips = d.get("batch256_images_per_s") or 256 / (d["batch256_ms"] / 1e3)
            return f"{d['batch1_ms']:.2f}, {ips:.0f}"
    return "-"
print(f"{t:<8} {row(f'{out}/f32-{t}.jsonl'):22} {row(f'{out}/int8-{t}.jsonl'):22} {row(f'{out}/ort-{t}.jsonl'):22}")
PY
done | tee "$out/table.txt"
