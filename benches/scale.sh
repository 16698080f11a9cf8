#!/usr/bin/env bash
# benches/scale.sh: steerdns's scale figures (run by benches/harness.sh; can run alone).
#
#   benches/scale.sh                       # builds steerdns --release if BIN is not given
#   NAMES=1000000 STEERED=10000 benches/scale.sh
#
# 1. Generates a zone of NAMES names (one A record each, plus SOA/NS) and a config steering
#    STEERED names (a third each: geo profile, weighted profile, anycast policy), from the
#    benchmark config in benches/configs/steerdns/.
# 2. `steerdns check`: wall time and peak RSS (GNU time).
# 3. `steerdns serve`: time from exec to the first answer (a UDP probe every 2 ms), RSS once
#    serving; the same at SMALL_NAMES names with and without the steered names (cold start);
#    memory per name from the difference.
# 4. A control change under full load, on the small benchmark zone and on the big one: dnsperf
#    runs DUR seconds at full speed, a third of the way in the control file's weights flip;
#    reports the reload time the server measured (taste + compile + swap, /v1/status
#    last_reload_ms), queries lost, and qps compared with a run without a change.
# Targets (issue 6): 1,000,000 names load in < 5 s with < 1 GiB RSS; cold start to first
# answer at 100,000 names < 0.5 s; no query lost during a control change.
# Only 127.0.0.1; every process started here is stopped by its session id.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/lib.sh"
CONF=$ROOT/benches/configs
NAMES=${NAMES:-1000000}
SMALL_NAMES=${SMALL_NAMES:-100000}
STEERED=${STEERED:-10000}
DUR=${DUR:-10}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PORT=${PORT:-15520}
ADMIN_PORT=${ADMIN_PORT:-15521}
MMDB=${MMDB:-$ROOT/geoip/example.mmdb}
bench_start scale
for t in dig dnsperf curl python3 taskset setsid /usr/bin/time; do
    command -v "$t" > /dev/null || die "missing $t (benches/harness.sh installs it)"
done

# ------------------------------------------------------------------ generated data
make_case() { # dir names steered -> a config dir serving big.example (+ steer.example)
    local d=$1 names=$2 steered=$3
    mkdir -p "$d/zones"
    cp "$CONF/zone.base" "$d/zones/steer.example.zone"
    big_zone "$names" > "$d/zones/big.example.zone"
    sed -e "s|@PORT@|$PORT|g" -e "s|@ADMIN_PORT@|$ADMIN_PORT|g" -e "s|@MMDB@|$MMDB|g" \
        "$CONF/steerdns/steerdns.toml.in" > "$d/steerdns.toml"
    awk -v n="$steered" 'BEGIN {
        split("profile = \"app\"|profile = \"wt\"|policy = \"anycast\"\nttl = 300", how, "|")
        for (i = 0; i < n; i++)
            printf "\n[[steered]]\nname = \"s%d.big.example.\"\n%s\n", i, how[i % 3 + 1]
    }' >> "$d/steerdns.toml"
    cp "$CONF/steerdns/control.toml" "$d/"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin.token"; chmod 600 "$d/admin.token"
}

# ------------------------------------------------------------------ serving
start_and_probe() { # dir probe-name -> starts the server; prints "ms_to_first_answer rss_mib"
    # Python starts the server itself (in a session of its own) so that its clock starts at the
    # exec, not after the interpreter's own start-up; it then polls with a UDP query every 2 ms.
    local d=$1 name=$2 log pid ms
    log=$OUT/serve.$(basename "$d").log
    ms=$(python3 "$ROOT/benches/first_answer.py" "$PORT" "$name" "$WORK/pid" "$log" taskset -c "$SERVER_CPU" "$BIN" serve --config "$d/steerdns.toml")
    local rc=$?
    pid=$(cat "$WORK/pid" 2> /dev/null)
    SESSION=$pid
    [ $rc = 0 ] || die "no answer from the server for $d (log: $log)"
    sleep 0.5 # let the heap settle before reading RSS
    echo "$ms $(awk '/^VmRSS/ { printf "%.0f", $2 / 1024 }' "/proc/$pid/status")"
}

status_field() { # python expression over /v1/status as `s`; empty when the server is busy
    curl -s --max-time 5 "http://127.0.0.1:$ADMIN_PORT/v1/status" |
        python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2> /dev/null
}

load_run() { # config-dir query-file flip(0|1) -> "qps lost reload_ms reloads_accepted_delta"
    local d=$1 qf=$2 flip=$3 o=$WORK/dnsperf.$RANDOM before after ms
    before=$(status_field "s['reloads_accepted']")
    taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$PORT" -d "$qf" -l "$DUR" -c 4 -q 200 -t 1 > "$o" 2>&1 &
    local dp=$!
    if [ "$flip" = 1 ]; then
        sleep "$(awk -v d="$DUR" 'BEGIN { print d / 3 }')"
        local c=$d/control.toml
        sed -e 's/weight = 90/weight = 80/' -e 's/weight = 10 /weight = 20 /' "$c" > "$c.tmp" && mv "$c.tmp" "$c"
    fi
    wait "$dp"
    after=$before
    for _ in $(seq 1 60); do # a big reload may outlast the run
        after=$(status_field "s['reloads_accepted']")
        [ "$flip" = 0 ] || [ "${after:-0}" -gt "${before:-0}" ] && break
        sleep 0.5
    done
    ms=$(status_field "round(s['last_reload_ms'], 1)")
    awk -v b="$before" -v a="$after" -v ms="$ms" '/Queries per second:/ { q = $4 } /Queries lost:/ { l = $3 }
        END { printf "%.0f %d %s %d\n", q, l, ms, a - b }' "$o"
}

describe() { # case -> what it serves
    case $1 in
    big) echo "$NAMES names, $STEERED steered" ;;
    small) echo "$SMALL_NAMES names, $STEERED steered" ;;
    plain) echo "$SMALL_NAMES names, 3 steered" ;;
    bench) echo "the benchmark zone only" ;;
    esac
}

# ------------------------------------------------------------------ main
R=$OUT/scale.txt
: > "$R"
log "generating $NAMES names + $STEERED steered names, and $SMALL_NAMES names"
make_case "$WORK/big" "$NAMES" "$STEERED"
make_case "$WORK/small" "$SMALL_NAMES" "$STEERED"
make_case "$WORK/plain" "$SMALL_NAMES" 0
make_case "$WORK/bench" 0 0
du -sh "$WORK/big/zones/big.example.zone" | awk '{ print "zone file of the big case: " $1 }' >> "$R"

for c in big small; do
    /usr/bin/time -f '%e %M' -o "$WORK/time.$c" "$BIN" check --config "$WORK/$c/steerdns.toml" > "$WORK/check.$c" 2>&1 ||
        { cat "$WORK/check.$c" >&2; die "steerdns check failed on the $c case"; }
    read -r secs kib < <(tail -1 "$WORK/time.$c")
    n=$([ $c = big ] && echo "$NAMES" || echo "$SMALL_NAMES")
    printf 'check %s (%d names, %d steered): %.2f s wall, peak RSS %.0f MiB  [%s]\n' \
        "$c" "$n" "$STEERED" "$secs" "$(awk -v k="$kib" 'BEGIN { print k / 1024 }')" "$(head -1 "$WORK/check.$c")" >> "$R"
done

declare -A RSS
for c in big small plain bench; do
    name=h$(($([ $c = big ] && echo "$NAMES" || echo "$SMALL_NAMES") - 1)).big.example
    [ $c = bench ] && name=www.steer.example
    start_and_probe "$WORK/$c" "$name" > "$WORK/serve.out" # not in a subshell: it sets SESSION
    read -r ms rss < "$WORK/serve.out"
    RSS[$c]=$rss
    printf 'serve %s (%s): first answer %s ms after exec, RSS %s MiB\n' "$c" "$(describe $c)" "$ms" "$rss" >> "$R"
    if [ $c = big ] || [ $c = bench ]; then
        echo "www.steer.example A" > "$WORK/q.www"
        read -r q0 l0 _ _ < <(load_run "$WORK/$c" "$WORK/q.www" 0)
        read -r q1 l1 rms n < <(load_run "$WORK/$c" "$WORK/q.www" 1)
        printf 'control change under load (%s): reload %s ms (taste+compile+swap), %d reload(s); lost %d of the run with the change (%d without); qps %s with, %s without\n' \
            "$c" "$rms" "$n" "$l1" "$l0" "$q1" "$q0" >> "$R"
        [ "$n" -ge 1 ] || log "!! the control change was not picked up during the $c run"
        printf '  peak RSS of %s after the change (two snapshots alive during the swap): %.0f MiB\n' "$c" \
            "$(awk '/^VmHWM/ { print $2 / 1024 }' "/proc/$SESSION/status")" >> "$R"
    fi
    stop_server
done
awk -v b="${RSS[big]}" -v s="${RSS[small]}" -v nb="$NAMES" -v ns="$SMALL_NAMES" \
    'BEGIN { printf "memory per name (RSS difference between %d and %d names): %.0f bytes\n", nb, ns, (b - s) * 1048576 / (nb - ns) }' >> "$R"
cat "$R"
