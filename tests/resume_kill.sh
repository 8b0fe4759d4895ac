#!/usr/bin/env bash
# A search killed with SIGKILL at random moments and resumed with --resume ends with
# bitwise the same state (checkpoint bytes: weights, alpha, optimizer states, statistics)
# and genotype as one never interrupted. Usage: resume_kill.sh EXAPT_BINARY
set -euo pipefail
exapt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
args=(search --backend cpu --limit 384 --batch 16 --channels 4 --layers 3 --steps 2
      --epochs 3 --arch-lr 0.03 --profile-every 0 --checkpoint-every 2)

"$exapt" "${args[@]}" --out "$dir/whole" 2>"$dir/whole.log"

# waits for a first checkpoint, then kills the search a random moment later
kill_later() {
    local pid=$1 t=0
    while [ ! -f "$dir/cut/checkpoint.safetensors" ] && kill -0 "$pid" 2>/dev/null; do
        sleep 0.1
    done
    sleep "0.$((RANDOM % 9 + 1))"
    if kill -0 "$pid" 2>/dev/null; then
        kill -9 "$pid"
        wait "$pid" || true
        return 0
    fi
    wait "$pid" || true
    return 1
}

kills=0
"$exapt" "${args[@]}" --out "$dir/cut" 2>"$dir/cut.log" &
for round in 1 2 3 4; do
    if kill_later $!; then kills=$((kills + 1)); else break; fi
    "$exapt" search --resume "$dir/cut" 2>>"$dir/cut.log" &
done
wait $! || { echo "the resumed search failed:"; tail -5 "$dir/cut.log"; exit 1; }
echo "killed $kills times"
[ "$kills" -ge 1 ] || { echo "the search finished before any kill: nothing was tested"; exit 1; }
cmp "$dir/whole/genotype.txt" "$dir/cut/genotype.txt"
cmp "$dir/whole/checkpoint.safetensors" "$dir/cut/checkpoint.safetensors"
echo "1 passed, 0 failed"
