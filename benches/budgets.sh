#!/usr/bin/env bash
# benches/budgets.sh: issue 31 item 5's figure — one tenant flooded at about twice what the
# server answers, another tenant asking at a tenth of it, with [budgets] off and on (same
# binary, same machine, back to back), on the bundled example with two tenants:
#
#   BIN=target/release/steerdns DUR=10 benches/budgets.sh
#
#   capacity  dnsperf alone, as fast as it goes, on the quiet tenant's name: C queries/s
#   off       flood: dnsperf at 2C/s on the flooded tenant; quiet: dnsperf at C/10 on the
#             other; [budgets] off
#   on        the same, with [budgets] capacity_qps = C, engage_at = ENGAGE, tenant_share = 0.1,
#             slip = 0 (ENGAGE sets engage_at, default 0.5: on two shared cores dnsperf itself
#             keeps the server from receiving all of C, so 0.8 flaps)
# Printed: C; per run the quiet tenant's answered share (completed / sent) and mean latency,
# the flooded tenant's answered queries/s, and what status says the budgets did. The server
# and both dnsperf processes share this machine's cores (stated with the figures). Only
# 127.0.0.1; every process is stopped by its session.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/lib.sh"
DUR=${DUR:-10}
PORT=${PORT:-15570}
ADMIN_PORT=${ADMIN_PORT:-15571}
bench_start budgets
need python3 setsid curl dnsperf

D=$WORK/site
mkdir -p "$D/tenants"
cp -r "$ROOT/zones" "$ROOT/geoip" "$ROOT/control.toml" "$ROOT/steerdns.toml" "$D/"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$D/admin.token"
chmod 600 "$D/admin.token"
printf 'names = ["flooded.edge.example.net."]\n' > "$D/tenants/flooded.toml"
printf 'names = ["quiet.edge.example.net."]\n' > "$D/tenants/quiet.toml"
echo "flooded.edge.example.net A" > "$WORK/flooded"
echo "quiet.edge.example.net A" > "$WORK/quiet"
cp "$D/steerdns.toml" "$D/base.toml"

start() { # extra config text
    { cat "$D/base.toml"; printf '\n%s\n' "$1"; } > "$D/steerdns.toml"
    setsid "$BIN" serve --config "$D/steerdns.toml" --listen "127.0.0.1:$PORT" \
        --admin-listen "127.0.0.1:$ADMIN_PORT" > "$OUT/serve.log" 2>&1 &
    SESSION=$!
    for _ in $(seq 1 300); do
        [ "$(status tenants.served)" = "2" ] && return 0
        sleep 0.1
    done
    cat "$OUT/serve.log" >&2
    die "tenants not served"
}
status() { # dotted path into /v1/status
    curl -s "http://127.0.0.1:$ADMIN_PORT/v1/status" | python3 -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print(json.dumps(v) if isinstance(v, (dict, list)) else v)' "$1" 2> /dev/null
}
perf() { # label file rate [outstanding]: at most `outstanding` queries in flight (the
    # flood's is large and its timeout 1 s, so that dropped answers do not slow it down)
    dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/$2" -l "$DUR" -c 4 -q "${4:-500}" -t 1 -Q "$3" \
        > "$OUT/dnsperf.$1" 2>&1
}
sent() { awk '/Queries sent/ { print $3 }' "$OUT/dnsperf.$1"; }
completed() { awk '/Queries completed/ { print $3 }' "$OUT/dnsperf.$1"; }
qps() { awk '/Queries per second/ { print $4 }' "$OUT/dnsperf.$1"; }
latency() { awk '/Average Latency/ { print $4 }' "$OUT/dnsperf.$1"; }

start ""
perf capacity quiet 10000000
C=$(qps capacity | cut -d. -f1)
stop_server
log "capacity: $C queries/s"
[ "${C:-0}" -gt 0 ] || die "no capacity measured"

run() { # label extra-config
    start "$2"
    perf "$1.flood" flooded $((2 * C)) 60000 &
    local flood=$!
    perf "$1.quiet" quiet $((C / 10))
    wait "$flood"
    echo "$1 budgets: $(status budgets)" >> "$OUT/summary"
    stop_server
    python3 - "$1" "$(sent "$1.quiet")" "$(completed "$1.quiet")" "$(latency "$1.quiet")" \
        "$(qps "$1.flood")" "$(sent "$1.flood")" << 'PY' | tee -a "$OUT/summary"
import sys
label, sent, done, lat, fqps, fsent = sys.argv[1:]
share = int(done) / max(1, int(sent))
print(f"{label}: quiet tenant answered {done}/{sent} = {share:.1%} (mean latency {float(lat)*1000:.2f} ms); "
      f"flooded tenant answered {float(fqps):.0f} q/s of {int(fsent)} sent")
PY
}

echo "capacity $C queries/s (dnsperf alone, -c 4)" > "$OUT/summary"
run off ""
run on "[budgets]
enabled = true
capacity_qps = $C
engage_at = ${ENGAGE:-0.5}
tenant_share = 0.1
slip = 0"
cat "$OUT/summary"
