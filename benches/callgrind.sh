#!/bin/sh
# Instructions per answer for every case of benches/answer_path.rs, counted by callgrind
# (deterministic on a noisy machine): builds the bench in release, runs each case N times
# under valgrind (one run per case), and prints repeat_case's inclusive Ir divided by N.
#
#   benches/callgrind.sh [N]        (default N = 20000)
#   CASES="static_precompiled nxdomain" benches/callgrind.sh   (only these cases)
set -eu
n=${1:-20000}
cd "$(dirname "$0")/.."
bin=$(cargo bench --bench answer_path --no-run --message-format=json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "answer_path" and m.get("executable"):
        print(m["executable"])')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
ANSWER_PATH_REPEAT=0 "$bin" --bench 2>&1 >/dev/null | sed -n 's/^repeat_case //p' >"$out/cases"
while read -r case; do
    if [ -n "${CASES:-}" ] && ! printf ' %s ' "$CASES" | grep -q " $case "; then
        continue
    fi
    ANSWER_PATH_REPEAT=$n ANSWER_PATH_CASE=$case valgrind --tool=callgrind \
        --callgrind-out-file="$out/cg.out" "$bin" --bench >/dev/null 2>&1
    callgrind_annotate --inclusive=yes --threshold=100 "$out/cg.out" 2>/dev/null |
        python3 -c '
import re, sys
for line in sys.stdin:
    m = re.match(r"\s*([\d,]+)\s.*answer_path::repeat_case \[", line)
    if m:
        ir = int(m.group(1).replace(",", "")) / int(sys.argv[1])
        print(f"{sys.argv[2]:32} {ir:9.0f} Ir/answer")
        break
' "$n" "$case"
done <"$out/cases"
