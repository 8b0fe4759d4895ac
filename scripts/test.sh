#!/usr/bin/env bash
# The whole test suite (the README's second command): the unit, vulkan and viz labels in
# build/ (which scripts/setup.sh built), then each reader's libFuzzer target for 20 s in
# build-fuzz/, a clang build with the sanitizers that this script configures. The long and
# cuda labels are run by hand (README, "GPU tests").
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
ctest --test-dir build -L 'unit|vulkan|viz' --output-on-failure -j"$jobs"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DEXAPT_FUZZ=ON -DEXAPT_CUDA=OFF \
    -DEXAPT_VULKAN=OFF -DEXAPT_VIZ=OFF -DEXAPT_OPENMP=OFF >/dev/null
cmake --build build-fuzz -j"$jobs" --target exapt_fuzz >/dev/null
ctest --test-dir build-fuzz -L fuzz --output-on-failure -j"$jobs"
