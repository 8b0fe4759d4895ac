#!/usr/bin/env bash
# Every function declared in include/exapt/ is called with bad arguments by test_errors.c,
# test_misuse.c, test_viz_misuse.c (the viewer's, run only in EXAPT_VIZ builds) or
# test_data_parallel.c (the MPI communicator's, run only in EXAPT_MPI builds) or
# test_data_parallel_nccl.c (the NCCL communicator's, in EXAPT_NCCL builds); a new
# public function without a misuse case fails this test.
# Usage: api_coverage.sh SOURCE_DIR
set -euo pipefail
src=$1
missing=0
for f in $(grep -hoE '\bex_[a-z0-9_]+\(' "$src"/include/exapt/*.h | tr -d '(' | sort -u); do
    # only declarations (a return type before the name), not names in comments
    grep -qE "^[A-Za-z0-9_ *]+[ *]$f\(" "$src"/include/exapt/*.h || continue
    if ! grep -q "\b$f(" "$src"/tests/test_errors.c "$src"/tests/test_misuse.c \
        "$src"/tests/test_viz_misuse.c "$src"/tests/test_data_parallel.c \
        "$src"/tests/test_data_parallel_nccl.c; then
        echo "not driven with bad arguments: $f"
        missing=$((missing + 1))
    fi
done
[ "$missing" -eq 0 ] || { echo "$missing public functions without a misuse case"; exit 1; }
echo "every public function has a misuse case"
