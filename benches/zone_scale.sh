#!/usr/bin/env bash
# benches/zone_scale.sh: issue 32's table — a zone of NAMES names loaded by NSD, Knot and
# steerdns in the same run, side by side.
#
#   BIN=target/release/steerdns benches/zone_scale.sh
#   NAMES=1000000 ROUNDS=3 benches/zone_scale.sh     # builds steerdns --release if BIN is unset
#
# For each server, on the same generated file (one A record per name, plus SOA/NS):
#   check   wall time and peak RSS of the zone checker (nsd-checkzone, kzonecheck,
#           `steerdns check`), GNU time
#   start   time from exec to the first answer for the zone's last name (a UDP query every
#           2 ms, sent by the same process that execs the server, so its clock starts at exec)
#   memory  PSS summed over the server's processes (the taster child included) once serving,
#           read from /proc/PID/smaps_rollup 1 s after the first answer
# steerdns runs three ways: as configured by default on new input (the taster on, no record
# of inputs served), restarted on the inputs it last served (not tasted again, see README
# "The taster"), and with `[taster] enabled = false`. Medians over ROUNDS. Only 127.0.0.1; every server is stopped by its session id.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/lib.sh"
CONF=$ROOT/benches/configs
NAMES=${NAMES:-1000000}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-15530}
ADMIN_PORT=${ADMIN_PORT:-15531}
MMDB=${MMDB:-$ROOT/geoip/example.mmdb}
bench_start zone-scale
for t in nsd nsd-checkzone knotd kzonecheck python3 setsid /usr/bin/time; do
    command -v "$t" > /dev/null || die "missing $t (apt-get install nsd knot knot-dnssecutils time)"
done

# ------------------------------------------------------------------ the three servers' inputs
ZONE=$WORK/zone/big.example.zone
mkdir -p "$WORK/zone"
big_zone "$NAMES" > "$ZONE"
LAST=h$((NAMES - 1)).big.example

mkdir -p "$WORK/nsd"
nsd_conf "$WORK/nsd" "$PORT" "$ZONE"

mkdir -p "$WORK/knot/run" "$WORK/knot/db"
cat > "$WORK/knot/knot.conf" << EOF
server:
    rundir: "$WORK/knot/run"
    listen: 127.0.0.1@$PORT
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
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
    zonefile-load: whole
    journal-content: none
zone:
  - domain: big.example.
EOF

steerdns_case() { # dir extra-toml
    local d=$1
    mkdir -p "$d/zones"
    cp "$CONF/zone.base" "$d/zones/steer.example.zone"
    ln -s "$ZONE" "$d/zones/big.example.zone"
    sed -e "s|@PORT@|$PORT|g" -e "s|@ADMIN_PORT@|$ADMIN_PORT|g" -e "s|@MMDB@|$MMDB|g" \
        "$CONF/steerdns/steerdns.toml.in" > "$d/steerdns.toml"
    printf '%s\n' "$2" >> "$d/steerdns.toml"
    cp "$CONF/steerdns/control.toml" "$d/"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin.token"
    chmod 600 "$d/admin.token"
}
steerdns_case "$WORK/steerdns" ""
steerdns_case "$WORK/steerdns-notaster" $'\n[taster]\nenabled = false'

# ------------------------------------------------------------------ measuring
timed() { # out-file cmd... -> "seconds peak_mib" (fails when the command fails)
    local o=$1
    shift
    /usr/bin/time -f '%e %M' -o "$WORK/time" "$@" > "$o" 2>&1 || { cat "$o" >&2; return 1; }
    awk '{ printf "%s %.0f\n", $1, $2 / 1024 }' "$WORK/time"
}

# Execs the server in a session of its own, polls until the last name answers; prints
# "ms_to_first_answer pss_mib" and leaves SESSION set to the server's session.
start_and_measure() { # log cmd...
    local log=$1 ms
    shift
    ms=$(python3 "$ROOT/benches/first_answer.py" "$PORT" "$LAST" "$WORK/pid" "$log" "$@")
    local rc=$?
    SESSION=$(cat "$WORK/pid" 2> /dev/null)
    [ $rc = 0 ] || { cat "$log" >&2; return 1; }
    sleep 1 # PSS once serving, not mid-start
    local kib=0 p
    for p in $(session_pids "$SESSION"); do
        kib=$((kib + $(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2> /dev/null || echo 0)))
    done
    echo "$ms $((kib / 1024))"
}

median() { python3 -c 'import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

declare -A CHECK_S CHECK_MIB START_MS PSS
wait_for_file() { # path seconds
    local deadline=$((SECONDS + $2))
    while [ ! -f "$1" ] && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    [ -f "$1" ] || log "note: $1 did not appear within $2 s"
}

measure() { # label check-cmd -- serve-cmd
    local label=$1
    shift
    local check=() serve=()
    while [ "$1" != -- ]; do check+=("$1"); shift; done
    shift
    serve=("$@")
    local cs=() cm=() sm=() pm=() r secs mib ms pss
    for r in $(seq 1 "$ROUNDS"); do
        [ -z "${BEFORE_ROUND:-}" ] || eval "$BEFORE_ROUND"
        if [ "${check[0]}" != - ]; then
            read -r secs mib < <(timed "$OUT/check.$label.$r.log" "${check[@]}") || die "$label: check failed"
            cs+=("$secs"); cm+=("$mib")
        fi
        # Not in a subshell: start_and_measure sets SESSION, which stop_server needs.
        start_and_measure "$OUT/serve.$label.$r.log" "${serve[@]}" > "$WORK/measured" || die "$label: no answer"
        read -r ms pss < "$WORK/measured"
        [ -z "${AFTER_ANSWER:-}" ] || eval "$AFTER_ANSWER"
        stop_server
        sm+=("$ms"); pm+=("$pss")
        log "$label round $r: check ${secs:-–} s ${mib:-–} MiB, first answer $ms ms, PSS $pss MiB"
    done
    if [ ${#cs[@]} -gt 0 ]; then CHECK_S[$label]=$(median "${cs[@]}"); CHECK_MIB[$label]=$(median "${cm[@]}"); fi
    START_MS[$label]=$(median "${sm[@]}")
    PSS[$label]=$(median "${pm[@]}")
}

log "zone of $NAMES names: $(du -h "$ZONE" | cut -f1)"
measure nsd nsd-checkzone big.example "$ZONE" -- nsd -d -c "$WORK/nsd/nsd.conf"
measure knot kzonecheck -o big.example. "$ZONE" -- knotd -c "$WORK/knot/knot.conf"
# New input: no record of inputs served before and no zone cache (both removed before each
# round), so tasted and built; the round waits (untimed) for the zone cache the server writes
# in the background after its first load, for the restart below.
STATE=$WORK/steerdns/steerdns.toml.state
BEFORE_ROUND='rm -rf "$STATE"' \
AFTER_ANSWER='wait_for_file "$STATE/zones.lkg" 120' measure steerdns \
    "$BIN" check --config "$WORK/steerdns/steerdns.toml" -- \
    "$BIN" serve --config "$WORK/steerdns/steerdns.toml"
# A restart on the inputs the last run served (its record and zone cache kept): not tasted
# again, the zones from the last-known-good cache.
measure steerdns-restart - -- "$BIN" serve --config "$WORK/steerdns/steerdns.toml"
grep -q "from the last-known-good zone cache" "$OUT"/serve.steerdns-restart.1.log 2> /dev/null \
    || log "note: the restart rows did not log a zone cache use (see $OUT/serve.steerdns-restart.*.log)"
# The taster off and no zone cache: what a build from the files costs in the server alone.
BEFORE_ROUND='rm -f "$WORK/steerdns-notaster/steerdns.toml.state/zones.lkg"' \
    measure steerdns-notaster - -- "$BIN" serve --config "$WORK/steerdns-notaster/steerdns.toml"

R=$OUT/zone_scale.md
{
    echo "| server | check: wall | check: peak RSS | first answer after exec | PSS once serving |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    for l in nsd knot steerdns steerdns-restart steerdns-notaster; do
        printf '| %s | %s | %s | %s ms | %s MiB |\n' "$l" \
            "${CHECK_S[$l]:+${CHECK_S[$l]} s}" "${CHECK_MIB[$l]:+${CHECK_MIB[$l]} MiB}" "${START_MS[$l]}" "${PSS[$l]}"
    done
    echo
    echo "$NAMES names, medians of $ROUNDS rounds, $(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$R"
log "table in $R"
