#!/usr/bin/env bash
# benches/harness.sh: steerdns against the socket-path limit and against gdnsd, Knot, NSD (and
# optionally PowerDNS), same zone, same steering, same load, same run.
#
#   benches/harness.sh              # install what is missing, build, check, measure, print the table
#   DUR=5 ROUNDS=1 benches/harness.sh
#   SERVERS="reflector steerdns gdnsd" WORKLOADS="static shed" benches/harness.sh
#   CHECK_ONLY=1 benches/harness.sh # start everything, run the dig checks, stop
#   DNSSEC=1 SERVERS=steerdns WORKLOADS="static static+do geo_eu geo_eu+do anycast anycast+do" \
#     ROUNDS=1 SCALE=0 benches/harness.sh   # signed zone: DO=1 against DO=0, same run
#
# What it does, in order:
#  1. apt-get installs what is missing (dnsperf, gdnsd, knot + knot-module-geoip, nsd, dig, gcc,
#     curl, python3; PowerDNS only when "pdns" is in SERVERS), builds steerdns --release and the
#     raw reflector (benches/reflector.c: recvmmsg, set QR, sendmmsg, batch 64, no parsing).
#  2. Renders benches/configs/ into a scratch directory: the zone steer.example (zone.base + each
#     server's zone.tail) and each server's config. Steering, identical everywhere:
#       app  geo by continent of the ECS address (else the source): EU 198.51.100.1,
#            NA 198.51.100.2, AS 198.51.100.3, anything else 203.0.113.1
#       wt   weighted 90/10: 192.0.2.100 / 192.0.2.101
#       edge anycast through the steered wildcard *.edge.steer.example (steerdns only): a
#            thousand customer names c0..c999.edge.steer.example, none of which exists, ECS NA
#       cdn  anycast 192.0.2.1 with a partial shed active: steerdns's shield sheds ~30% of
#            eu-west's client subnets to eu-north (198.51.100.5), frozen there for the run;
#            gdnsd and PowerDNS do the nearest thing (EU clients: 70/30 weighted); Knot, NSD: n/a
#     The database is the repository's geoip/example.mmdb (MaxMind format; RIPE /8s are EU,
#     ARIN NA, APNIC AS, 10/8 is nowhere).
#  3. Starts every server in its own session, pinned to CPU $SERVER_CPU, one worker where the
#     server allows; checks every server's answers with dig and stops with an error if any is
#     wrong (KEEP_GOING=1 drops that server instead).
#  4. Runs each workload on each server ROUNDS times (servers interleaved inside a workload, the
#     order reversed every other round): dnsperf on CPU $CLIENT_CPU, -l DUR -c 4 -q 200 -T 1, no
#     rate limit. Server CPU = utime+stime of every process in the server's session (/proc),
#     so the fair figure is completed queries per server-CPU-second. A row disturbed by other
#     processes on the machine (OTHER > NOISE_PCT of the two cores) is re-run up to RETRIES
#     times (RETRY_BUDGET re-runs in all, to bound the run time) and the least disturbed run kept.
#  5. A latency pass (LAT_DUR s per cell, dnsperf -v, which prints each response's latency):
#     p50/p99. dnsperf -v costs the client about half its speed, so this pass runs at a lower
#     rate than the throughput rounds; the throughput rounds report dnsperf's average and max.
#  DNSSEC=1 signs steer.example on steerdns (a fresh ECDSA P-256 CSK, `steerdns dnssec keygen`)
#  and checks that DO answers carry RRSIGs. A workload named W+do is W with the DO bit set
#  (dnsperf -D); the table then adds, per server, W+do's queries per CPU-second over W's.
#  6. Prints the table (median over rounds): qps, server CPU s, queries per server-CPU-second,
#     ratio to the reflector and to gdnsd, lost, latency; then runs benches/scale.sh (SCALE=0
#     skips it).
# Every process started here is stopped by its session id (TERM, then KILL after 10 s), also on
# error or Ctrl-C. Only 127.0.0.1 is used; the ECS addresses are data inside the queries.
#
# Knobs: DUR=10 ROUNDS=2 CLIENTS=4 OUTSTANDING=200 DNSPERF_THREADS=1 TIMEOUT=1 LAT_DUR=3
#   SERVERS="reflector steerdns gdnsd knot nsd" (+ pdns)
#   WORKLOADS="static geo_eu geo_none weighted shed" (also: geo_na geo_as geo_noecs anycast
#   edge, and any of them +do)  DNSSEC=0
#   SERVER_CPU=0 CLIENT_CPU=1 BASE_PORT=15500 NOISE_PCT=15 RETRIES=1 RETRY_BUDGET=10
#   SCALE=1 OUT=dir
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BENCH=$ROOT/benches
CONF=$BENCH/configs
DUR=${DUR:-10}
ROUNDS=${ROUNDS:-2}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}
DNSPERF_THREADS=${DNSPERF_THREADS:-1}
TIMEOUT=${TIMEOUT:-1}
LAT_DUR=${LAT_DUR:-3}
SERVERS=${SERVERS:-"reflector steerdns gdnsd knot nsd"}
WORKLOADS=${WORKLOADS:-"static geo_eu geo_none weighted shed"}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BASE_PORT=${BASE_PORT:-15500}
NOISE_PCT=${NOISE_PCT:-15}
RETRIES=${RETRIES:-1}
RETRY_BUDGET=${RETRY_BUDGET:-10}
SCALE=${SCALE:-1}
CHECK_ONLY=${CHECK_ONLY:-0}
DNSSEC=${DNSSEC:-0}
KEEP_GOING=${KEEP_GOING:-0}
MMDB=${MMDB:-$ROOT/geoip/example.mmdb}
RUN_ID=$(date -u +%Y%m%dT%H%M%SZ)
OUT=${OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-harness/$RUN_ID}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# ------------------------------------------------------------------ 1. tools
packages_needed() {
    local p pkgs=(dnsperf gdnsd knot knot-module-geoip nsd bind9-dnsutils gcc libc6-dev curl
        python3 util-linux procps time)
    case " $SERVERS " in *" pdns "*) pkgs+=(pdns-server pdns-backend-bind pdns-backend-geoip) ;; esac
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
    done
}

install_tools() {
    local missing
    missing=$(packages_needed | tr '\n' ' ')
    [ -z "${missing// /}" ] && return 0
    [ "$(id -u)" = 0 ] || die "missing packages: $missing (run as root, or apt-get install them)"
    log "apt-get install $missing"
    # Keep the distribution's own services from starting: the harness runs its own instances.
    local guard=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
        guard=/usr/sbin/policy-rc.d
    fi
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing \
            > "$OUT/apt.log" 2>&1
    local rc=$?
    [ -n "$guard" ] && rm -f "$guard"
    [ $rc = 0 ] || die "apt-get install failed (see $OUT/apt.log)"
}

build() {
    command -v cargo > /dev/null || die "cargo not found (install Rust: https://rustup.rs)"
    log "cargo build --release"
    (cd "$ROOT" && cargo build --release --quiet) || die "cargo build failed"
    BIN=$TARGET_DIR/release/steerdns
    [ -x "$BIN" ] || die "no binary at $BIN"
    mkdir -p "$WORK/bin"
    gcc -O2 -Wall -o "$WORK/bin/reflector" "$BENCH/reflector.c" || die "cannot build the reflector"
}

# ------------------------------------------------------------------ processes
declare -A PORT SID CHECKED
ADMIN_PORT=$((BASE_PORT + 10))
i=0
for s in reflector steerdns gdnsd knot nsd pdns; do PORT[$s]=$((BASE_PORT + i)); i=$((i + 1)); done

session_pids() { # sid -> pids of the processes in that session
    cat /proc/[0-9]*/stat 2> /dev/null | awk -v sid="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($4 == sid) print pid }'
}

session_ticks() { # sid -> utime+stime (clock ticks) over the processes of that session
    cat /proc/[0-9]*/stat 2> /dev/null | awk -v sid="$1" '{ sub(/^.*\) /, ""); if ($4 == sid) t += $12 + $13 } END { print t + 0 }'
}

stop_session() { # name
    local s=$1 sid=${SID[$1]:-} p left
    [ -n "$sid" ] || return 0
    for p in $(session_pids "$sid"); do kill -TERM "$p" 2> /dev/null; done
    for _ in $(seq 1 50); do
        left=$(session_pids "$sid")
        [ -z "$left" ] && break
        sleep 0.2
    done
    for p in $(session_pids "$sid"); do
        log "$s: process $p ignored TERM for 10 s: KILL"
        kill -KILL "$p" 2> /dev/null
    done
    unset "SID[$s]"
}

cleanup() {
    local s
    for s in "${!SID[@]}"; do stop_session "$s"; done
    [ -n "${WORK:-}" ] && rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

render() { # template dir port -> stdout
    sed -e "s|@DIR@|$2|g" -e "s|@PORT@|$3|g" -e "s|@MMDB@|$MMDB|g" -e "s|@ADMIN_PORT@|$ADMIN_PORT|g" "$1"
}

answers_soa() { # port
    dig +time=1 +tries=1 @127.0.0.1 -p "$1" steer.example SOA 2> /dev/null | grep -q 'status: NOERROR'
}

start() { # server
    local s=$1 d=$WORK/$1 p=${PORT[$1]}
    local -a cmd
    mkdir -p "$d"
    case $s in
    reflector) cmd=("$WORK/bin/reflector" 127.0.0.1 "$p") ;;
    steerdns)
        mkdir -p "$d/zones"
        cp "$CONF/zone.base" "$d/zones/steer.example.zone"
        render "$CONF/steerdns/steerdns.toml.in" "$d" "$p" > "$d/steerdns.toml"
        cp "$CONF/steerdns/control.toml" "$d/"
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin.token"; chmod 600 "$d/admin.token"
        if [ "$DNSSEC" = 1 ]; then
            printf '\n[dnssec]\nkeys = "keys"\nzones = ["steer.example."]\n' >> "$d/steerdns.toml"
            "$BIN" dnssec keygen steer.example. --config "$d/steerdns.toml" > "$OUT/logs/keygen.log" 2>&1 ||
                die "steerdns dnssec keygen failed (see $OUT/logs/keygen.log)"
        fi
        cmd=("$BIN" serve --config "$d/steerdns.toml") ;;
    gdnsd)
        mkdir -p "$d/etc/zones" "$d/run" "$d/state"
        cat "$CONF/zone.base" "$CONF/gdnsd/zone.tail" > "$d/etc/zones/steer.example"
        render "$CONF/gdnsd/config.in" "$d" "$p" > "$d/etc/config"
        cmd=(gdnsd -c "$d/etc" start) ;;
    knot)
        mkdir -p "$d/run" "$d/db"
        cat "$CONF/zone.base" "$CONF/knot/zone.tail" > "$d/steer.example.zone"
        render "$CONF/knot/knot.conf.in" "$d" "$p" > "$d/knot.conf"
        cp "$CONF/knot/app.geo" "$CONF/knot/wt.geo" "$d/"
        cmd=(knotd -c "$d/knot.conf") ;;
    nsd)
        cat "$CONF/zone.base" "$CONF/nsd/zone.tail" > "$d/steer.example.zone"
        render "$CONF/nsd/nsd.conf.in" "$d" "$p" > "$d/nsd.conf"
        cmd=(nsd -d -c "$d/nsd.conf") ;;
    pdns)
        cat "$CONF/zone.base" "$CONF/pdns/zone.tail" > "$d/steer.example.zone"
        render "$CONF/pdns/pdns.conf.in" "$d" "$p" > "$d/pdns.conf"
        render "$CONF/pdns/named.conf.in" "$d" "$p" > "$d/named.conf"
        cp "$CONF/pdns/geo-zones.yaml" "$d/"
        cmd=(pdns_server --config-dir="$d") ;;
    *) die "unknown server $s" ;;
    esac
    log "start $s on 127.0.0.1:$p (CPU $SERVER_CPU): ${cmd[*]}"
    setsid taskset -c "$SERVER_CPU" "${cmd[@]}" > "$OUT/logs/$s.log" 2>&1 < /dev/null &
    local pid=$!
    # setsid in a non-leader child makes the session in place: pid == sid. Read it to be sure.
    local sid=""
    for _ in $(seq 1 20); do
        sid=$(awk '{ sub(/^.*\) /, ""); print $4 }' "/proc/$pid/stat" 2> /dev/null)
        [ "$sid" = "$pid" ] && break
        sleep 0.05
    done
    [ "$sid" = "$pid" ] || die "$s: could not put it in a session of its own"
    SID[$s]=$sid
    for _ in $(seq 1 100); do
        if answers_soa "$p"; then return 0; fi
        kill -0 "$pid" 2> /dev/null || { tail -20 "$OUT/logs/$s.log" >&2; die "$s exited at start"; }
        sleep 0.2
    done
    die "$s did not answer within 20 s (log: $OUT/logs/$s.log)"
}

# ------------------------------------------------------------------ steering state
ECS_EU=2.1.1.0/24 ECS_NA=3.1.1.0/24 ECS_AS=1.1.1.0/24 ECS_NONE=10.1.1.0/24 ECS_NA_CHECK=3.7.7.0/24
SHED_SUBNET=""

steerdns_status() { # python expression over the /v1/status JSON `s`
    curl -s --max-time 2 "http://127.0.0.1:$ADMIN_PORT/v1/status" |
        python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2> /dev/null
}

# Pushes a load feed that makes eu-west hot, waits for the shield to shed ~30% of its client
# subnets, then freezes the shield (control file) so the shed holds still while we measure.
steerdns_shed() {
    local d=$WORK/steerdns f=0
    sed -e "s|@NOW@|$(date -u +%Y-%m-%dT%H:%M:%SZ)|" -e "s|@EU_WEST_LOAD@|900|" \
        "$CONF/steerdns/load.json.in" > "$d/load.json.tmp" && mv "$d/load.json.tmp" "$d/load.json"
    for _ in $(seq 1 60); do
        f=$(steerdns_status "s['shield']['regions'][0]['shed_fraction']")
        python3 -c "import sys; sys.exit(0 if float('${f:-0}') >= 0.28 else 1)" && break
        sleep 0.5
    done
    { echo 'shield = "frozen"'; cat "$CONF/steerdns/control.toml"; } > "$d/control.toml.tmp" &&
        mv "$d/control.toml.tmp" "$d/control.toml"
    for _ in $(seq 1 40); do
        [ "$(steerdns_status "s['shield']['mode']")" = frozen ] && break
        sleep 0.25
    done
    f=$(steerdns_status "round(s['shield']['regions'][0]['shed_fraction'], 3)")
    log "steerdns: shield sheds $f of eu-west's client subnets to eu-north (frozen)"
    echo "steerdns shield: eu-west shed fraction $f (frozen)" >> "$OUT/checks.txt"
    # The workload's subnet: the first eu-west /24 (5.0.N.0/24, RIPE space) that is shed.
    local n a
    for n in $(seq 0 255); do
        a=$(dig +short +time=1 +tries=1 @127.0.0.1 -p "${PORT[steerdns]}" cdn.steer.example A "+subnet=5.0.$n.0/24")
        if [ "$a" = 198.51.100.5 ]; then SHED_SUBNET=5.0.$n.0/24; break; fi
    done
    [ -n "$SHED_SUBNET" ] || die "steerdns: no shed subnet found in 5.0.0.0/16"
    log "shed workload subnet: $SHED_SUBNET"
}

# ------------------------------------------------------------------ 3. checks
supports() { # server workload -> 0 when that server has that kind of answer
    case $1/${2%+do} in
    nsd/static | nsd/check_static) return 0 ;;
    nsd/*) return 1 ;;
    knot/shed | knot/anycast) return 1 ;;
    steerdns/edge | reflector/edge) return 0 ;;
    */edge) return 1 ;;
    *) return 0 ;;
    esac
}

check_server() { # server -> 0 when every answer is right; the evidence goes to checks.txt
    local s=$1 p=${PORT[$1]} ok=1 a n100 n101 n5 n1 got
    local D=(dig +time=2 +tries=2 @127.0.0.1 -p "$p")
    local C=$OUT/checks.txt
    expect() { # what got want
        if [ "$2" = "$3" ]; then echo "  ok    $1: $2" >> "$C"; else
            echo "  WRONG $1: got '$2', want '$3'" >> "$C"
            ok=0
        fi
    }
    echo "== $s (127.0.0.1:$p)" >> "$C"
    if [ "$s" = reflector ]; then
        got=$("${D[@]}" www.steer.example A | grep -E -o 'status: [A-Z]+|flags: qr|ANSWER: [0-9]+' | tr '\n' ' ')
        expect "www A reflected (QR set, no records)" "$got" "status: NOERROR flags: qr ANSWER: 0 "
        CHECKED[$s]=$ok
        return
    fi
    expect "SOA rname" "$("${D[@]}" +short steer.example SOA | awk '{print $2}')" hostmaster.steer.example.
    expect "www A" "$("${D[@]}" +short www.steer.example A)" 192.0.2.10
    expect "ns1 A" "$("${D[@]}" +short ns1.steer.example A)" 192.0.2.53
    if [ "$DNSSEC" = 1 ] && [ "$s" = steerdns ]; then
        for q in "www.steer.example A" "app.steer.example A +subnet=$ECS_EU" "cdn.steer.example A +subnet=$ECS_NA_CHECK"; do
            # shellcheck disable=SC2086
            got=$("${D[@]}" +dnssec +norec $q | awk '!/^;/ && $4 == "RRSIG" { n++ } END { print n + 0 }')
            expect "$q +dnssec: RRSIGs" "$got" 1
        done
        # A wildcard answer: its RRSIG, and the NSEC proving the name does not exist, signed.
        got=$("${D[@]}" +dnssec +norec +subnet=$ECS_NA_CHECK c7.edge.steer.example A |
            awk '!/^;/ { n[$4]++ } END { print n["A"] + 0, n["RRSIG"] + 0, n["NSEC"] + 0 }')
        expect "c7.edge A +dnssec: A, RRSIGs, NSEC" "$got" "1 2 1"
    fi
    if supports "$s" edge && [ "$s" != reflector ]; then
        expect "c7.edge A ECS $ECS_NA_CHECK" "$("${D[@]}" +short +subnet=$ECS_NA_CHECK c7.edge.steer.example A)" 192.0.2.1
    fi
    if supports "$s" geo_eu; then
        expect "app A ECS $ECS_EU" "$("${D[@]}" +short +subnet=$ECS_EU app.steer.example A)" 198.51.100.1
        expect "app A ECS $ECS_NA" "$("${D[@]}" +short +subnet=$ECS_NA app.steer.example A)" 198.51.100.2
        expect "app A ECS $ECS_AS" "$("${D[@]}" +short +subnet=$ECS_AS app.steer.example A)" 198.51.100.3
        expect "app A ECS $ECS_NONE" "$("${D[@]}" +short +subnet=$ECS_NONE app.steer.example A)" 203.0.113.1
        expect "app A no ECS (127.0.0.1)" "$("${D[@]}" +short app.steer.example A)" 203.0.113.1
    fi
    if supports "$s" weighted; then
        # 400 client subnets: steerdns is sticky per /24, the others pick at random per query.
        for n in $(seq 0 399); do echo "wt.steer.example A +subnet=77.$((n / 200)).$((n % 200)).0/24"; done > "$WORK/wt.batch"
        got=$("${D[@]}" +short -f "$WORK/wt.batch")
        n100=$(grep -c '^192\.0\.2\.100$' <<< "$got")
        n101=$(grep -c '^192\.0\.2\.101$' <<< "$got")
        echo "  wt x400: $n100 x .100, $n101 x .101 (want 90/10: 320..390 and 10..80)" >> "$C"
        if ! { [ "$n100" -ge 320 ] && [ "$n100" -le 390 ] && [ "$n101" -ge 10 ] && [ "$n101" -le 80 ] &&
            [ $((n100 + n101)) = 400 ]; }; then
            echo "  WRONG wt distribution" >> "$C"
            ok=0
        fi
    fi
    if supports "$s" shed; then
        expect "cdn A ECS $ECS_NA_CHECK (not shed)" "$("${D[@]}" +short +subnet=$ECS_NA_CHECK cdn.steer.example A)" 192.0.2.1
        for n in $(seq 0 299); do echo "cdn.steer.example A +subnet=5.$((1 + n / 200)).$((n % 200)).0/24"; done > "$WORK/cdn.batch"
        got=$("${D[@]}" +short -f "$WORK/cdn.batch")
        n5=$(grep -c '^198\.51\.100\.5$' <<< "$got")
        n1=$(grep -c '^192\.0\.2\.1$' <<< "$got")
        echo "  cdn x300 EU subnets: $n5 shed to 198.51.100.5, $n1 kept on 192.0.2.1 (want ~30% shed: 55..125)" >> "$C"
        if ! { [ "$n5" -ge 55 ] && [ "$n5" -le 125 ] && [ $((n5 + n1)) = 300 ]; }; then
            echo "  WRONG cdn shed share" >> "$C"
            ok=0
        fi
    fi
    CHECKED[$s]=$ok
}

# ------------------------------------------------------------------ 4. load
ecs_option() { # a.b.c.0/24 -> dnsperf -E value: ECS, family 1, source /24, scope 0, 3 bytes
    local ip=${1%/*}
    local IFS=.
    # shellcheck disable=SC2086
    set -- $ip
    printf '8:00011800%02x%02x%02x' "$1" "$2" "$3"
}

workload_args() { # workload -> query file, then dnsperf extra args (W+do: W with DO set)
    case $1 in
    *+do) echo "$(workload_args "${1%+do}") -D" ;;
    static) echo "$WORK/q.www" ;;
    geo_eu) echo "$WORK/q.app -E $(ecs_option $ECS_EU)" ;;
    geo_na) echo "$WORK/q.app -E $(ecs_option $ECS_NA)" ;;
    geo_as) echo "$WORK/q.app -E $(ecs_option $ECS_AS)" ;;
    geo_none) echo "$WORK/q.app -E $(ecs_option $ECS_NONE)" ;;
    geo_noecs) echo "$WORK/q.app" ;;
    weighted) echo "$WORK/q.wt" ;;
    anycast) echo "$WORK/q.cdn -E $(ecs_option $ECS_NA_CHECK)" ;;
    edge) echo "$WORK/q.edge -E $(ecs_option $ECS_NA_CHECK)" ;;
    shed) echo "$WORK/q.cdn -E $(ecs_option "$SHED_SUBNET")" ;;
    *) die "unknown workload $1" ;;
    esac
}

cpu_sample() { # -> "busy0 busy1 softirq0 softirq1" (ticks) for the server and client CPUs
    awk -v a="cpu$SERVER_CPU" -v b="cpu$CLIENT_CPU" '$1 == a || $1 == b {
        busy = $2 + $3 + $4 + $7 + $8 + $9; v[$1] = busy " " $8 }
        END { split(v[a], x, " "); split(v[b], y, " "); print x[1], y[1], x[2], y[2] }' /proc/stat
}

HDR="run	round	server	workload	qps	sent	completed	lost	avg_ms	max_ms	server_cpu_s	dnsperf_cpu_s	runtime_s	q_per_cpu_s	other_pct	softirq0_pct	attempts"

measure() { # round server workload attempt -> one TSV row
    local r=$1 s=$2 w=$3 a=$4 p=${PORT[$2]} args o hz t0 t1 c0 c1
    read -r -a args <<< "$(workload_args "$w")"
    o=$OUT/dnsperf/$s.$w.r$r.a$a.txt
    hz=$(getconf CLK_TCK)
    t0=$(session_ticks "${SID[$s]}")
    c0=$(cpu_sample)
    /usr/bin/time -f '%U %S' -o "$o.time" taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$p" \
        -d "${args[0]}" -l "$DUR" -c "$CLIENTS" -T "$DNSPERF_THREADS" -q "$OUTSTANDING" \
        -t "$TIMEOUT" "${args[@]:1}" > "$o" 2>&1
    t1=$(session_ticks "${SID[$s]}")
    c1=$(cpu_sample)
    awk -v run="$RUN_ID" -v r="$r" -v s="$s" -v w="$w" -v hz="$hz" -v t0="$t0" -v t1="$t1" \
        -v c0="$c0" -v c1="$c1" -v att="$a" -v tf="$o.time" '
        /Queries sent:/ { sent = $3 }
        /Queries completed:/ { comp = $3 }
        /Queries lost:/ { lost = $3 }
        /Run time \(s\):/ { rt = $4 }
        /Queries per second:/ { qps = $4 }
        /Average Latency \(s\):/ { avg = $4 * 1000; mx = $8; sub(/\)/, "", mx); mx *= 1000 }
        END {
            while ((getline tl < tf) > 0) last = tl   # time(1) may add a line before its own
            split(last, tt, " "); dcpu = tt[1] + tt[2]
            split(c0, a, " "); split(c1, b, " ")
            scpu = (t1 - t0) / hz
            wall = (rt > 0) ? rt : 1
            busy = (b[1] - a[1] + b[2] - a[2]) / hz
            soft = (b[3] - a[3] + b[4] - a[4]) / hz
            other = busy - scpu - dcpu - soft; if (other < 0) other = 0
            printf "%s\t%s\t%s\t%s\t%.0f\t%d\t%d\t%d\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f\t%.0f\t%.1f\t%.1f\t%d\n",
                run, r, s, w, qps, sent, comp, lost, avg, mx, scpu, dcpu, rt,
                (scpu > 0) ? comp / scpu : 0, 100 * other / (2 * wall), 100 * (b[3] - a[3]) / hz / wall, att
        }' "$o"
}

measure_clean() { # round server workload -> $WORK/row: the least disturbed of up to 1+RETRIES runs
    local r=$1 s=$2 w=$3 a row best="" best_other=999999 other
    for a in $(seq 0 "$RETRIES"); do
        row=$(measure "$r" "$s" "$w" "$a")
        other=$(cut -f15 <<< "$row")
        if awk -v x="$other" -v y="$best_other" 'BEGIN { exit !(x < y) }'; then best=$row; best_other=$other; fi
        awk -v x="$other" -v n="$NOISE_PCT" 'BEGIN { exit !(x <= n) }' && break
        [ "$RETRY_BUDGET" -gt 0 ] || break
        RETRY_BUDGET=$((RETRY_BUDGET - 1))
        log "    other processes took $other% of the two CPUs: again ($RETRY_BUDGET retries left in this run)"
        sleep 1
    done
    echo "$best" > "$WORK/row"
}

latency_pass() { # server workload -> "p50_ms p99_ms" from dnsperf -v
    local s=$1 w=$2 args
    read -r -a args <<< "$(workload_args "$w")"
    taskset -c "$CLIENT_CPU" dnsperf -v -s 127.0.0.1 -p "${PORT[$s]}" -d "${args[0]}" -l "$LAT_DUR" \
        -c "$CLIENTS" -T "$DNSPERF_THREADS" -q "$OUTSTANDING" -t "$TIMEOUT" "${args[@]:1}" 2>&1 |
        awk '/^> /{ print $NF * 1000 }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit }
            printf "%.3f %.3f\n", v[int((NR - 1) * 0.50) + 1], v[int((NR - 1) * 0.99) + 1] }'
}

# ------------------------------------------------------------------ 6. table
print_table() {
    python3 - "$OUT/rows.tsv" "$OUT/latency.tsv" "$WORKLOADS" "$SERVERS" << 'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
lat = {}
for line in open(sys.argv[2]):
    s, w, p50, p99 = line.split()
    lat[(s, w)] = (p50, p99)
workloads, servers = sys.argv[3].split(), sys.argv[4].split()
def cell(s, w, key):
    vals = [float(r[key]) for r in rows if r["server"] == s and r["workload"] == w]
    return statistics.median(vals) if vals else None
print("| workload | server | qps | server CPU s | queries / server-CPU-s | × reflector | × gdnsd | lost | avg / max ms | p50 / p99 ms (-v pass) | other % |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for w in workloads:
    ref, gd = cell("reflector", w, "q_per_cpu_s"), cell("gdnsd", w, "q_per_cpu_s")
    for s in servers:
        q = cell(s, w, "q_per_cpu_s")
        if q is None:
            print(f"| {w} | {s} | n/a | | | | | | | | |")
            continue
        lost = sum(int(r["lost"]) for r in rows if r["server"] == s and r["workload"] == w)
        rr = f"{q / ref:.2f}" if ref else "-"
        rg = f"{q / gd:.2f}" if gd and s != "reflector" else "-"
        p50, p99 = lat.get((s, w), ("-", "-"))
        print(f"| {w} | {s} | {cell(s, w, 'qps'):,.0f} | {cell(s, w, 'server_cpu_s'):.2f} | {q:,.0f} | {rr} | {rg} "
              f"| {lost} | {cell(s, w, 'avg_ms'):.3f} / {cell(s, w, 'max_ms'):.1f} | {p50} / {p99} | {cell(s, w, 'other_pct'):.0f} |")
pairs = [(w[:-3], w) for w in workloads if w.endswith("+do") and w[:-3] in workloads]
if pairs:
    print()
    print("| workload | server | queries / server-CPU-s, DO=0 | DO=1 | DO=1 / DO=0 |")
    print("|---|---|---:|---:|---:|")
    for base, do in pairs:
        for s in servers:
            q0, q1 = cell(s, base, "q_per_cpu_s"), cell(s, do, "q_per_cpu_s")
            if q0 and q1:
                print(f"| {base} | {s} | {q0:,.0f} | {q1:,.0f} | {q1 / q0:.2f} |")
PY
}

# ------------------------------------------------------------------ main
mkdir -p "$OUT/dnsperf" "$OUT/logs"
WORK=$(mktemp -d /tmp/steerdns-harness.XXXXXX)
: > "$OUT/checks.txt"
install_tools
build
{
    echo "run $RUN_ID"; date -u; uname -sr; echo "nproc $(nproc)"; grep -m1 'model name' /proc/cpuinfo
    dnsperf -h 2>&1 | grep -m1 Version; nsd -v 2>&1 | head -1; knotd -V 2>&1 | head -1
    gdnsd 2>&1 | grep -m1 -i version; "$BIN" --version
    echo "DUR=$DUR ROUNDS=$ROUNDS CLIENTS=$CLIENTS OUTSTANDING=$OUTSTANDING THREADS=$DNSPERF_THREADS SERVERS=$SERVERS WORKLOADS=$WORKLOADS"
} > "$OUT/env.txt" 2>&1
echo "www.steer.example A" > "$WORK/q.www"
echo "app.steer.example A" > "$WORK/q.app"
echo "wt.steer.example A" > "$WORK/q.wt"
echo "cdn.steer.example A" > "$WORK/q.cdn"
for n in $(seq 0 999); do echo "c$n.edge.steer.example A"; done > "$WORK/q.edge"

ACTIVE=()
for s in $SERVERS; do start "$s"; done
case " $SERVERS " in *" steerdns "*) steerdns_shed ;; *) SHED_SUBNET=5.0.0.0/24 ;; esac
for s in $SERVERS; do
    check_server "$s"
    if [ "${CHECKED[$s]}" = 1 ]; then ACTIVE+=("$s"); else
        log "!! $s answers wrong:"; grep -A0 WRONG "$OUT/checks.txt" >&2
        [ "$KEEP_GOING" = 1 ] || die "$s failed its checks (see $OUT/checks.txt)"
        stop_session "$s"
    fi
done
cat "$OUT/checks.txt" >&2
[ "$CHECK_ONLY" = 1 ] && { log "checks done"; exit 0; }

echo "$HDR" > "$OUT/rows.tsv"
: > "$OUT/latency.tsv"
for r in $(seq 1 "$ROUNDS"); do
    order=("${ACTIVE[@]}")
    if [ $((r % 2)) = 0 ]; then
        order=()
        for ((k = ${#ACTIVE[@]} - 1; k >= 0; k--)); do order+=("${ACTIVE[$k]}"); done
    fi
    for w in $WORKLOADS; do
        for s in "${order[@]}"; do
            supports "$s" "$w" || continue
            log "round $r/$ROUNDS: $s / $w (${DUR}s)"
            measure_clean "$r" "$s" "$w" # not in a subshell: it spends RETRY_BUDGET
            row=$(cat "$WORK/row")
            echo "$row" >> "$OUT/rows.tsv"
            awk -F'\t' '{ printf "    qps %s, server CPU %s s, %s q/CPU-s, lost %s, other %s%%\n", $5, $11, $14, $8, $15 }' <<< "$row" >&2
        done
    done
done
if [ "$LAT_DUR" != 0 ]; then
    for w in $WORKLOADS; do
        for s in "${ACTIVE[@]}"; do
            supports "$s" "$w" || continue
            log "latency pass: $s / $w (${LAT_DUR}s, dnsperf -v)"
            echo "$s $w $(latency_pass "$s" "$w")" >> "$OUT/latency.tsv"
        done
    done
fi
print_table | tee "$OUT/table.md"
log "rows: $OUT/rows.tsv, dnsperf output: $OUT/dnsperf/, checks: $OUT/checks.txt"
for s in "${!SID[@]}"; do stop_session "$s"; done

if [ "$SCALE" = 1 ]; then
    BIN=$BIN OUT=$OUT/scale SERVER_CPU=$SERVER_CPU CLIENT_CPU=$CLIENT_CPU DUR=$DUR \
        MMDB=$MMDB "$BENCH/scale.sh" || die "scale figures failed"
fi
