#!/usr/bin/env bash
# Installs exapt's dependencies (Debian/Ubuntu), builds it in build/, and runs the main
# job: a quick search on Fashion-MNIST and the training of what it finds (runs/quick/).
# Safe to run again: apt skips what is installed, CMake rebuilds what changed, and the main
# job resumes (or reports) the one already in runs/quick.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo_cmd=""
if [ "$(id -u)" -ne 0 ]; then
    sudo_cmd="sudo"
fi

packages=(build-essential cmake pkg-config libopenblas-dev libopenblas-openmp-dev libcmocka-dev
          libjansson-dev zlib1g-dev libpng-dev dataset-fashion-mnist help2man)
# ONNX export (protobuf-c and Debian's onnx.proto) and its checks (onnx.checker; Node.js for
# onnxruntime's binding, below)
packages+=(libprotobuf-c-dev protobuf-c-compiler libonnx-dev python3-onnx)
# int8 GEMMs (oneDNN: AVX2, AVX-512 or VNNI kernels chosen at run time)
packages+=(libdnnl-dev)
command -v npm >/dev/null || packages+=(nodejs npm)
# the Vulkan backend: shader compiler, loader and headers, lavapipe, validation layers
packages+=(glslang-tools libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers)
# the fuzz targets (EXAPT_FUZZ): clang with libFuzzer and the sanitizer runtimes
packages+=(clang libclang-rt-14-dev)
# data parallelism over MPI (exapt_mpi and its two-rank tests)
packages+=(libopenmpi-dev openmpi-bin)
# the viewer (viz/) and its CI window under Xvfb
packages+=(xvfb libsdl2-dev libsdl2-ttf-dev libsdl2-image-dev libfontconfig-dev fonts-dejavu-core)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# the ONNX export's test runs the model on onnxruntime through npm's onnxruntime-node (its CPU
# binaries are in the package; --ignore-scripts skips the download of its CUDA ones)
ort=build/onnxruntime
if [ ! -f "$ort/node_modules/onnxruntime-node/package.json" ]; then
    mkdir -p "$ort"
    npm install --prefix "$ort" --ignore-scripts --no-audit --no-fund onnxruntime-node@1.30.0 \
        >/dev/null || echo "setup: npm could not install onnxruntime-node: the test of the" \
        "ONNX export on onnxruntime is left out" >&2
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${EXAPT_CMAKE_ARGS:-}
cmake --build build -j"$(nproc)"

# the main job: a short architecture search on Fashion-MNIST on the best backend found,
# then the training of the network it found, evaluated on the test set
./build/apps/exapt info --backend auto
out=${EXAPT_QUICK_OUT:-runs/quick}
if [ -f "$out/metrics.jsonl" ]; then
    # an earlier setup's job: an interrupted one goes on, a finished one reports its result
    ./build/apps/exapt search --resume "$out"
else
    ./build/apps/exapt search --preset quick --out "$out"
fi
