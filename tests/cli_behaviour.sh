#!/usr/bin/env bash
# The command's contract with scripts: results on standard output and progress on standard
# error; a bad option is one line and exit 2; a run directory that holds a run is refused
# (exit 1) unless --resume continues it or --force replaces it, and --force removes only
# the run's own files.
# Usage: cli_behaviour.sh EXAPT_BINARY
set -euo pipefail
exapt=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export OMP_NUM_THREADS=1
args=(search --backend cpu --limit 64 --batch 8 --channels 4 --layers 2 --steps 2 --epochs 1
      --profile-every 0 --train-epochs 0)

# a bad option: one line naming it, a pointer to --help, exit 2, nothing on stdout
rc=0
"$exapt" "${args[@]}" --out "$dir/run" --bogus >"$dir/out" 2>"$dir/err" || rc=$?
[ "$rc" -eq 2 ] || fail "bad option: exit $rc, not 2"
[ "$(wc -l <"$dir/err")" -eq 2 ] || fail "bad option: $(wc -l <"$dir/err") lines on stderr"
grep -q "unknown option '--bogus'" "$dir/err" || fail "bad option not named"
grep -q -- "--help" "$dir/err" || fail "no pointer to --help"
[ ! -s "$dir/out" ] || fail "bad option wrote to stdout"
[ ! -e "$dir/run" ] || fail "bad option created the run directory"

# results on stdout, progress on stderr
"$exapt" "${args[@]}" --out "$dir/run" >"$dir/out" 2>"$dir/err" || fail "the first run failed"
grep -q "^genotype: Genotype(normal=" "$dir/out" || fail "no genotype on stdout"
grep -q "^saved in $dir/run/genotype.json" "$dir/out" || fail "no genotype path on stdout"
[ "$(wc -l <"$dir/out")" -eq 2 ] || fail "stdout holds more than the result"
grep -q "^search epoch 1/1 done" "$dir/err" || fail "no progress on stderr"
first=$(cat "$dir/run/genotype.txt")

# the same --out again: refused, the first run untouched
cp "$dir/run/metrics.jsonl" "$dir/metrics.before"
rc=0
"$exapt" "${args[@]}" --seed 7 --out "$dir/run" >"$dir/out" 2>"$dir/err" || rc=$?
[ "$rc" -eq 1 ] || fail "a second run into a run directory: exit $rc, not 1"
grep -q "holds a run" "$dir/err" && grep -q -- "--force" "$dir/err" && grep -q -- "--resume" "$dir/err" ||
    fail "the refusal does not say why and what to do: $(cat "$dir/err")"
cmp -s "$dir/metrics.before" "$dir/run/metrics.jsonl" || fail "the refused run changed the log"

# --resume of the finished run: accepted, the same result
"$exapt" search --resume "$dir/run" >"$dir/out" 2>"$dir/err" || fail "--resume failed"
grep -qxF "genotype: $first" "$dir/out" || fail "--resume printed another genotype"

# --force: a new run; the old run's files (a training's in train/ too) go, others stay
mkdir -p "$dir/run/train"
echo old >"$dir/run/train/weights.safetensors"
echo mine >"$dir/run/notes.txt"
"$exapt" "${args[@]}" --seed 7 --out "$dir/run" --force >"$dir/out" 2>"$dir/err" ||
    fail "--force failed: $(tail -2 "$dir/err")"
[ ! -e "$dir/run/train" ] || fail "--force left the old training"
[ "$(cat "$dir/run/notes.txt")" = mine ] || fail "--force removed a file that is not the run's"
[ "$(grep -c '"type":"header"' "$dir/run/metrics.jsonl")" -eq 1 ] || fail "two runs in one log"
grep -q '"--seed","7"' "$dir/run/metrics.jsonl" || fail "the log is not the new run's"
echo "cli behaviour: ok"
