#!/usr/bin/env bash
# Builds exapt for the lent Hopper GPU machine (sm_90, CUDA, no viewer) and packs what a
# run there needs into .gpu/bundle.tar.xz (git ignores .gpu/): the programs, libexapt.so
# and its backend modules, the shared libraries that machine lacks, and Fashion-MNIST. Carry .gpu, and there:
#   mkdir -p /tmp/x && tar xJf .gpu/bundle.tar.xz -C /tmp/x && export LD_LIBRARY_PATH=/tmp/x/lib
#   /tmp/x/bin/test_ops --backend cuda; /tmp/x/bin/exapt search --data /tmp/x/data ...
#   /tmp/x/bin/test_ops --backend vulkan (needs the driver's Vulkan ICD, e.g. nvidia_icd.json)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p "$(git rev-parse --git-dir)/info"
exclude="$(git rev-parse --git-dir)/info/exclude"
grep -qx "/.gpu/" "$exclude" 2>/dev/null || echo /.gpu/ >> "$exclude"
export PATH=/usr/local/cuda/bin:$PATH
build=build-gpu
# Vulkan whenever glslang is here (said explicitly: an older cache may hold OFF)
vulkan=OFF
command -v glslangValidator >/dev/null && vulkan=ON
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DEXAPT_CUDA=ON -DEXAPT_CUDA_ARCHS=90 \
      -DEXAPT_VIZ=OFF -DEXAPT_VULKAN=$vulkan >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
stage=.gpu/stage
rm -rf "$stage" && mkdir -p "$stage/bin" "$stage/lib" "$stage/data"
bins=("$build/apps/exapt" "$build"/tests/test_ops "$build"/tests/test_search
      "$build"/tests/test_reliability "$build"/tests/soak_search)
# the Vulkan backend's tests, when it was built (SPIR-V is embedded; the loader travels),
# and the data-parallel test whose ranks are threads
for t in test_vulkan test_backend_search test_data_parallel_threads test_data_parallel_nccl; do
    [ -x "$build/tests/$t" ] && bins+=("$build/tests/$t")
done
for extra in "$build"/bench/*; do [ -x "$extra" ] && [ -f "$extra" ] && bins+=("$extra"); done
cp "${bins[@]}" "$stage/bin/"
# the backend modules the command's libexapt.so loads from its own folder
modules=("$build"/libexapt-*.so)
cp "${modules[@]}" "$stage/lib/"
cp -r bench/*.py "$stage/bin/" 2>/dev/null || true
# the GPU machine has the C runtime, CUDA and NCCL (PyTorch's: put its folder on
# LD_LIBRARY_PATH there); everything else travels
skip='^(linux-vdso|libc\.|libm\.|libpthread|libdl\.|librt\.|ld-linux|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libnccl)'
for b in "${bins[@]}" "${modules[@]}"; do
    ldd "$b" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
        [[ "$name" =~ $skip ]] || cp -L "$path" "$stage/lib/$name"
    done
done
cp /usr/share/datasets/fashion-mnist/*.gz "$stage/data/"
tar cJf .gpu/bundle.tar.xz -C "$stage" .
rm -rf "$stage"
du -h .gpu/bundle.tar.xz
