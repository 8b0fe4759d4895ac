#!/usr/bin/env bash
# The DARTS search step of exapt against PyTorch eager on the lent GPU machine
# (docs/bench.md, "DARTS search step against PyTorch"). Unpack the bundle that
# scripts/gpu-bundle.sh makes, then run this from the repository root:
#   mkdir -p /tmp/x && tar xJf .gpu/bundle.tar.xz -C /tmp/x && bash bench/run_darts_gpu.sh
# Environment: OUT, the folder for the results (required); X, the unpacked bundle
# (/tmp/x); ITERS, timed steps per side (20); BACKEND, exapt's backend (cuda).
set -euo pipefail
x=${X:-/tmp/x}
out=${OUT:?OUT must name the folder for the results}
iters=${ITERS:-20}
backend=${BACKEND:-cuda}
export LD_LIBRARY_PATH="$x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONUNBUFFERED=1
mkdir -p "$out"
work=$(mktemp -d /tmp/darts_step.XXXXXX)
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv \
    > "$out/gpu.csv" 2>&1 || true
runs=()
for input in 32x32x3 28x28x1; do
    "$x/bin/bench_darts_step" --backend "$backend" --input "$input" --batch 64 --channels 16 \
        --layers 8 --iters "$iters" --out "$work/$input"
    cp "$work/$input/exapt.json" "$out/exapt_$input.json"
    runs+=(--run "$work/$input")
done
# the run folders (checkpoints, batches) stay in $work: only the reports travel back
python3 "$x/bin/darts_step.py" "${runs[@]}" --out "$out/darts_step.json"
