#!/usr/bin/env bash
# On the lent GPU machine, from the repository root with .gpu (scripts/gpu-bundle.sh) and
# .gl (../shared/gpu/fetch-vulkan-loader.sh) carried: one edge's mixed sum against PyTorch,
# and gated gdas/top-k steps against supernets of the active sets' size on CUDA and Vulkan
# (bench/results/README.md). Everything lands in $OUT/gates.tar.
set -o pipefail; for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /tmp/x && tar xJf .gpu/bundle.tar.xz -C /tmp/x && export LD_LIBRARY_PATH=/tmp/x/lib PYTHONUNBUFFERED=1
/tmp/x/bin/exapt info --backend vulkan 2>&1 | grep -q -i "nvidia" || export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
R=$PWD; B=/tmp/x/bin; mkdir -p $OUT/g
# one edge's mixed sum: exapt, then PyTorch's formulations beside it
$B/bench_mixed_sum cuda 50 > $OUT/mixed-sum-exapt.jsonl 2> $OUT/mixed-sum-exapt.err; echo "mixed_sum rc=$?"
timeout 240 python3 bench/mixed_sum.py --exapt $OUT/mixed-sum-exapt.jsonl --out $OUT/mixed-sum.json > $OUT/mixed-sum.txt 2>&1; echo "mixed_sum.py rc=$?"; tail -8 $OUT/mixed-sum.txt
# gates against re-planning: gated steps of the whole supernet, and the setup and first step of supernets of the active sets' size
C3=sep_conv_3x3,max_pool_3x3,skip_connect; C2=sep_conv_3x3,skip_connect
for be in cuda vulkan; do
 it=10; [ $be = vulkan ] && it=5
 for m in darts gdas topk; do timeout 150 $B/bench_darts_step --backend $be --mode $m --iters $it --out $OUT/g/$be-$m 2>&1 | tail -1; done
 timeout 150 $B/bench_darts_step --backend $be --mode darts --cands $C3 --iters $it --out $OUT/g/$be-c3 2>&1 | tail -1
 timeout 150 $B/bench_darts_step --backend $be --mode darts --cands $C2 --iters $it --out $OUT/g/$be-c2 2>&1 | tail -1
done
rm -f $OUT/g/*/*.safetensors $OUT/g/*/batch.bin
cd $OUT && tar cf /tmp/f.tar . && rm -rf $OUT/* && mv /tmp/f.tar $OUT/gates.tar
