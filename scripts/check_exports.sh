#!/usr/bin/env bash
# The shared library exports the public API and nothing else: every dynamic symbol it
# defines is an ex_ function declared in include/exapt/ (cmake/exapt.map keeps the rest
# local). Usage: check_exports.sh LIBEXAPT_SO INCLUDE_DIR
set -euo pipefail
lib=$1
inc=$2
declared=$(grep -hoE '\bex_[a-z0-9_]+\(' "$inc"/exapt/*.h | tr -d '(' | sort -u)
bad=0
n=0
while read -r sym; do
    n=$((n + 1))
    if ! grep -qxF "$sym" <<<"$declared"; then
        echo "exported but not public API: $sym"
        bad=$((bad + 1))
    fi
done < <(nm -D --defined-only "$lib" | awk '$2 != "A" {print $3}' | sed 's/@.*//')
[ "$n" -gt 0 ] || { echo "$lib exports nothing"; exit 1; }
[ "$bad" -eq 0 ] || { echo "$bad symbols exported beyond the API"; exit 1; }
echo "$lib: $n symbols exported, all of them ex_ functions of include/exapt/"
