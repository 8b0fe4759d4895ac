#!/usr/bin/env bash
# One arm of the fashion preset's ablation on one GPU: searches or trainings whose every
# choice is scored on 10,000 held-out training images (--holdout), never the test split.
# Each row writes OUT/NAME.log and OUT/NAME/ (the run); summarise with ablation_table.py.
#   ablation_gpu.sh EXAPT DATA OUT ROW...
# Rows:
#   search-pc1      the fashion preset's search (all channels), then its genotype trained
#   search-pc4      the same with partial channels (1/4) and 4x the batch, as PC-DARTS
#   search-noguard  the same search with no warm-up and no cap on parameter-free ops
#   train-plain     the seed-2 genotype at evaluation size: cutout, flip, drop path, aux
#   train-tricks    the same with label smoothing 0.1 and test-time flip
# Trainings run TRAIN_EPOCHS epochs (6) so an arm fits one device call.
set -euo pipefail
exapt=$1 data=$2 out=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
epochs=${TRAIN_EPOCHS:-6}
train=(--train-epochs "$epochs" --train-holdout 10000)
mkdir -p "$out"
row() {
    local name=$1
    shift
    rm -rf "${out:?}/$name"
    local t0 t1
    t0=$(date +%s.%N)
    "$exapt" "$@" --backend cuda --data "$data" --out "$out/$name" >"$out/$name.log" 2>&1
    t1=$(date +%s.%N)
    echo "$name $t0 $t1" >>"$out/times.txt"
}
fixed=(train --genotype "$here/results/fashion-s2-genotype.txt" --channels 36 --layers 20
    --batch 96 --epochs "$epochs" --lr 0.05 --drop-path 0.1 --cutout 8 --flip --holdout 10000)
for r in "$@"; do
    case $r in
    search-pc1) row "$r" search --preset fashion --seed 3 "${train[@]}" ;;
    search-pc4)
        row "$r" search --preset fashion --seed 3 --partial-channels 4 --batch 256 --lr 0.1 \
            "${train[@]}"
        ;;
    search-noguard)
        row "$r" search --preset fashion --seed 3 --arch-warmup 0 --max-param-free -1 \
            "${train[@]}"
        ;;
    train-plain) row "$r" "${fixed[@]}" ;;
    train-tricks) row "$r" "${fixed[@]}" --label-smoothing 0.1 --tta ;;
    *)
        echo "ablation_gpu.sh: unknown row $r" >&2
        exit 2
        ;;
    esac
done
