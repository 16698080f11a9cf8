#!/usr/bin/env bash
# Fuzzing smoke run (CI): build every fuzz target, then run each for a short fixed time from
# the committed seeds (and every saved reproducer), with a fixed libFuzzer seed. Fails on any
# crash, panic, timeout or out-of-memory. See fuzz/README.md.
#
#   FUZZ_SMOKE_SECONDS   seconds per target (default 20)
#   FUZZ_SANITIZER       address (default) or none (faster build, catches panics only)
#
# Only stable Rust is installed: RUSTC_BOOTSTRAP=1 lets cargo-fuzz pass its -Z flags.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SMOKE_SECONDS:-20}"
sanitizer="${FUZZ_SANITIZER:-address}"
export RUSTC_BOOTSTRAP=1
started=$(date +%s)

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    cargo install --locked cargo-fuzz
fi
cargo fuzz build --sanitizer "$sanitizer"

# A throwaway corpus: each run starts from the committed seeds only, so CI is repeatable.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for target in $(cargo fuzz list); do
    mkdir -p "$work/$target" "artifacts/$target"
    dirs=("$work/$target" "seeds/$target")
    [[ -d "regressions/$target" ]] && dirs+=("regressions/$target")
    echo "== fuzz smoke: $target (${seconds}s)"
    log="$work/$target.log"
    if ! cargo fuzz run --sanitizer "$sanitizer" "$target" "${dirs[@]}" -- \
        -max_total_time="$seconds" -seed=1 -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="artifacts/$target/" -print_final_stats=1 >"$log" 2>&1; then
        grep -Ev '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)' "$log" | tail -n 80 >&2
        echo "fuzz smoke: $target FAILED; reproducer under fuzz/artifacts/$target/" >&2
        exit 1
    fi
    grep -E 'DONE|^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
done
echo "fuzz smoke: all targets passed in $(( $(date +%s) - started ))s"
