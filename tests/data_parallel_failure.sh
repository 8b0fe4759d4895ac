#!/usr/bin/env bash
# A rank of a two-rank search dies (SIGKILL) or stops answering after 3 steps: the job must
# end with a failure, and quickly (the bound: within 60 s), never hang.
# usage: data_parallel_failure.sh die|hang MPIRUN... TEST_PROGRAM
set -uo pipefail
failure=$1
shift
log=$(mktemp)
start=$(date +%s)
# a 5 s collective timeout; the outer timeout only catches a hang of this test itself
timeout 120 "$@" "$failure" 5 >"$log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
cat "$log"
fail() { echo "data_parallel_failure ($failure): $*"; rm -f "$log"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung (killed after 120 s)"
[ "$took" -le 60 ] || fail "the job took $took s to end (at most 60)"
if [ "$failure" = hang ]; then
    grep -q "no answer from the other ranks in 5 s" "$log" ||
        fail "rank 0 did not report the timed-out collective"
fi
rm -f "$log"
echo "data_parallel_failure ($failure): the job ended with status $rc after $took s"
