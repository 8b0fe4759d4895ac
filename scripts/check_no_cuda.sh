#!/usr/bin/env bash
# The library and the command load where the CUDA runtime does not: with the folder that
# holds libcudart and libcublas hidden (a private mount namespace binds an empty folder
# over it), `exapt info` lists the other backends and says why CUDA did not load, and a
# CPU search runs. Needs a CUDA build and root (unshare). Usage: check_no_cuda.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
[ -f "$build/libexapt-cuda.so" ] || { echo "no CUDA module in $build: not a CUDA build"; exit 1; }
if ldd "$build/libexapt.so" | grep -qE 'libcudart|libcublas'; then
    echo "libexapt.so itself needs the CUDA runtime"; exit 1
fi
cuda_dir=$(dirname "$(ldd "$build/libexapt-cuda.so" | awk '/libcudart/ {print $3}')")
[ -d "$cuda_dir" ] || { echo "the CUDA module's runtime was not found to hide"; exit 1; }
empty=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$empty" "$work"' EXIT
unshare -m bash -euo pipefail -c '
    mount --bind "$1" "$2"
    "$3/apps/exapt" info > "$4/info.txt" 2>&1
    OMP_NUM_THREADS=1 "$3/apps/exapt" search --backend cpu --limit 64 --batch 8 --channels 4 \
        --layers 2 --steps 2 --epochs 1 --profile-every 0 --train-epochs 0 \
        --out "$4/run" > "$4/search.txt" 2>&1
    rc=0
    "$3/apps/exapt" search --backend cuda --limit 64 --out "$4/cuda" > "$4/cuda.txt" 2>&1 || rc=$?
    echo "$rc" > "$4/cuda.rc"' hide "$empty" "$cuda_dir" "$build" "$work"
cat "$work/info.txt"
grep -q "^cuda: cannot open: module .*libexapt-cuda.so not loaded: lib\(cudart\|cublas\)" \
    "$work/info.txt" || { echo "exapt info does not say why CUDA did not load"; exit 1; }
grep -q "^cpu: " "$work/info.txt" || { echo "exapt info lists no CPU backend"; exit 1; }
grep -q "^genotype: Genotype(" "$work/search.txt" || { cat "$work/search.txt"; exit 1; }
[ "$(cat "$work/cuda.rc")" -ne 0 ] || { echo "--backend cuda did not fail without CUDA"; exit 1; }
grep -q "not loaded" "$work/cuda.txt" || { cat "$work/cuda.txt"; exit 1; }
echo "without the CUDA runtime ($cuda_dir hidden): exapt info and a CPU search run; --backend cuda fails saying why"
