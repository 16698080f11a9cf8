#!/usr/bin/env bash
# benches/zone_change.sh: issue 32 item 4 — "a change costs the change". A zone of NAMES
# names is served by steerdns, Knot and NSD in turn (same file, same run); each round edits one
# record in the middle of the file and bumps the SOA serial (the file replaced by a rename),
# asks for a reload, and times from the request to the new answer being served.
#
#   BIN=/work/target-rel/release/steerdns benches/zone_change.sh
#   NAMES=1000000 ROUNDS=5 benches/zone_change.sh     # builds steerdns --release if BIN is unset
#
#   steerdns  SIGHUP (the taster on, as configured by default), applied as a difference
#   knot      `knotc zone-reload` with `zonefile-load: difference` (journal-content: changes)
#   nsd       `nsd-control reload big.example` (NSD re-reads the whole zone)
# The clock: benches/changed_answer.py starts it, sends the SIGHUP or runs the command, and
# queries every 1 ms until the answer holds the new address. Medians over ROUNDS. Only
# 127.0.0.1; every server is stopped by its session id.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/lib.sh"
CONF=$ROOT/benches/configs
NAMES=${NAMES:-1000000}
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-15540}
ADMIN_PORT=${ADMIN_PORT:-15541}
MMDB=${MMDB:-$ROOT/geoip/example.mmdb}
bench_start zone-change
need nsd nsd-control knotd knotc python3
MID=$((NAMES / 2))
NAME=h$MID.big.example
LAST=h$((NAMES - 1)).big.example

ZONE=$WORK/zone/big.example.zone
mkdir -p "$WORK/zone"
big_zone "$NAMES" > "$WORK/base.zone"

# Round r's file: serial r + 1, h$MID at 198.51.100.r; written beside and renamed into place.
edit_zone() { # round
    awk -v r="$1" -v mid="h$MID" '
        /IN SOA/ { sub(/ 1 3600 /, " " (r + 1) " 3600 ") }
        $1 == mid { $0 = mid " IN A 198.51.100." r }
        { print }' "$WORK/base.zone" > "$ZONE.new"
    mv "$ZONE.new" "$ZONE"
}

median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# Starts a server (in a session of its own) and waits for its first answer.
serve() { # label cmd...
    local label=$1
    shift
    cp "$WORK/base.zone" "$ZONE"
    python3 "$ROOT/benches/first_answer.py" "$PORT" "$LAST" "$WORK/pid" "$OUT/serve.$label.log" "$@" \
        > /dev/null || { cat "$OUT/serve.$label.log" >&2; die "$label: no first answer"; }
    SESSION=$(cat "$WORK/pid")
}

declare -A MS
rounds() { # label trigger...
    local label=$1 r ms all=()
    shift
    for r in $(seq 1 "$ROUNDS"); do
        edit_zone "$r"
        ms=$(python3 "$ROOT/benches/changed_answer.py" "$PORT" "$NAME" "198.51.100.$r" "$@") \
            || die "$label round $r: the new answer was never served"
        all+=("$ms")
        log "$label round $r: new answer after $ms ms"
        [ -z "${AFTER_ROUND:-}" ] || eval "$AFTER_ROUND"
        sleep 1
    done
    MS[$label]=$(median "${all[@]}")
    stop_server
}

# ------------------------------------------------------------------ steerdns
D=$WORK/steerdns
mkdir -p "$D/zones"
cp "$CONF/zone.base" "$D/zones/steer.example.zone"
ln -s "$ZONE" "$D/zones/big.example.zone"
sed -e "s|@PORT@|$PORT|g" -e "s|@ADMIN_PORT@|$ADMIN_PORT|g" -e "s|@MMDB@|$MMDB|g" \
    "$CONF/steerdns/steerdns.toml.in" > "$D/steerdns.toml"
cp "$CONF/steerdns/control.toml" "$D/"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$D/admin.token"
chmod 600 "$D/admin.token"
serve steerdns "$BIN" serve --config "$D/steerdns.toml"
# Status says how each reload took its zones (a difference, or why not).
AFTER_ROUND='curl -s -H "Authorization: Bearer $(cat "$D/admin.token")" \
    "http://127.0.0.1:$ADMIN_PORT/v1/status" | python3 -c "import json,sys; s=json.load(sys.stdin); \
print(\"    zones:\", s[\"zones_from\"], \"| taster:\", s[\"taster\"][\"last_result\"], s[\"taster\"][\"last_ms\"], \"ms\")" >&2' \
    rounds steerdns sighup "$SESSION"

# ------------------------------------------------------------------ Knot
mkdir -p "$WORK/knot/run" "$WORK/knot/db"
cat > "$WORK/knot/knot.conf" << KNOT
server:
    rundir: "$WORK/knot/run"
    listen: 127.0.0.1@$PORT
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
control:
    listen: "$WORK/knot/run/knot.sock"
log:
  - target: stderr
    any: warning
database:
    storage: "$WORK/knot/db"
template:
  - id: default
    storage: "$WORK/zone"
    file: "%s.zone"
    zonefile-sync: -1
    zonefile-load: difference
    journal-content: changes
zone:
  - domain: big.example.
KNOT
serve knot knotd -c "$WORK/knot/knot.conf"
rounds knot knotc -c "$WORK/knot/knot.conf" zone-reload big.example.

# ------------------------------------------------------------------ NSD
mkdir -p "$WORK/nsd"
nsd_conf "$WORK/nsd" "$PORT" "$ZONE" "$WORK/nsd/nsd.sock"
serve nsd nsd -d -c "$WORK/nsd/nsd.conf"
rounds nsd nsd-control -c "$WORK/nsd/nsd.conf" reload big.example

R=$OUT/zone_change.md
{
    echo "| server | reload asked | change to new answer (median) |"
    echo "| --- | --- | ---: |"
    printf '| steerdns | SIGHUP | %s ms |\n' "${MS[steerdns]}"
    printf '| Knot 3.2 | knotc zone-reload (zonefile-load: difference) | %s ms |\n' "${MS[knot]}"
    printf '| NSD 4.6 | nsd-control reload | %s ms |\n' "${MS[nsd]}"
    echo
    echo "$NAMES names, one A record changed and the serial bumped per round, medians of $ROUNDS rounds, $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$R"
log "table in $R"
