#!/usr/bin/env bash
# benches/xdp.sh: queries per server-CPU-second on the socket path and on the AF_XDP path, in one
# run, in two network namespaces joined by a veth pair (made here, removed on exit).
#
#   sudo benches/xdp.sh                    # build --release, measure, print the table
#   DUR=5 ROUNDS=1 benches/xdp.sh
#   WORKLOADS="static geo_eu" benches/xdp.sh
#
# What it does:
#  1. apt-get installs what is missing (dnsperf, iproute2, dig), builds steerdns --release
#     (BIN=path skips the build).
#  2. Makes namespaces sdns-bs-PID (server) and sdns-bc-PID (client), a veth pair between them,
#     198.18.1.1/30 on the server side. Renders the harness's steerdns config
#     (benches/configs/steerdns: the same zone, steering and one UDP worker as benches/harness.sh)
#     to listen on 198.18.1.1:53, once as is ("socket") and once with [server.xdp] on the
#     server's end of the pair ("xdp": copy mode on veth, one queue).
#  3. For every round, both modes (order reversed every other round): starts steerdns in the
#     server namespace pinned to CPU $SERVER_CPU, checks with dig that every workload's answer
#     is right (and, for xdp, that the answers came from the XDP queues), then runs each workload
#     with dnsperf in the client namespace pinned to CPU $CLIENT_CPU: -l DUR -c CLIENTS
#     -q OUTSTANDING, no rate limit.
#  4. CPU counted for the server, per run (tick-based accounting, HZ from getconf; the kernel has
#     no IRQ_TIME_ACCOUNTING, so a tick that lands in softirq is charged both to /proc/stat's
#     softirq column and to the task it interrupted -- each tick is counted once here):
#       server  utime+stime of the steerdns process (all threads, /proc/PID/stat). It includes
#               the softirq work done inside its own send calls: veth hands our reply to the
#               client's namespace there, so the *client's* receive of the answer (IP, UDP,
#               socket queue) is charged to the server, the same way on both paths.
#       rx      softirq ticks of every CPU but the server's (/proc/stat) plus ksoftirqd on the
#               server's CPU: dnsperf's send runs the server side's receive on its own CPU
#               (socket path: IP/UDP receive; XDP path: the XDP program and the copy into the
#               UMEM), in softirq.
#     q/cpu-s = completed queries / (server + rx), the "conservative" figure. The table also
#     gives it without the client's receive of the answers (server - softirq ticks of the
#     server's CPU, which land inside steerdns's sends), the "server only" figure.
#     Medians over rounds.
#  5. CPU_MAX=F (e.g. 0.5) runs steerdns in a cgroup (v1 cpu controller, 10 ms period) limited
#     to F of one CPU, so both paths are saturated at the same fixed budget and compared by
#     what they complete in it -- "queries per CPU-second" with the server behind on both
#     paths, as in a flood. Without it the server keeps up and each wake-up carries 1-3 queries.
#  6. PROFILE=1 samples both CPUs with `perf record -a -g` (cpu-clock) during each run and writes
#     the hottest symbols per mode and workload to $OUT/profile.MODE.WORKLOAD.txt, and the XDP
#     queue counters (replies per TX kick) to $OUT/xdp-status.WORKLOAD.txt. perf costs CPU
#     itself: figures from a profiled run are for the profile, not for the table.
# Every process started here is killed and both namespaces deleted on exit or Ctrl-C. No packet
# leaves the two namespaces.
#
# Knobs: DUR=10 ROUNDS=3 CLIENTS=4 OUTSTANDING=200 TIMEOUT=1 SERVER_CPU=0 CLIENT_CPU=1
#   CPU_MAX= (unset: no limit) PROFILE= ATTACH=auto|native|generic WORKLOADS="static geo_eu geo_none weighted" OUT=dir BIN=path
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONF=$ROOT/benches/configs
DUR=${DUR:-10}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-200}
TIMEOUT=${TIMEOUT:-1}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
WORKLOADS=${WORKLOADS:-"static geo_eu geo_none weighted"}
CPU_MAX=${CPU_MAX:-}
PROFILE=${PROFILE:-}
ATTACH=${ATTACH:-auto}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
OUT=${OUT:-$TARGET_DIR/bench-xdp/$(date -u +%Y%m%dT%H%M%SZ)}
SERVER_IP=198.18.1.1
CLIENT_IP=198.18.1.2
ADMIN=127.0.0.1:5381
TAG=$$
NS_S=sdns-bs-$TAG
NS_C=sdns-bc-$TAG
IF_S=bs$TAG
IF_C=bc$TAG

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, XDP)"

# ------------------------------------------------------------------ 1. tools and binary
missing=()
command -v dnsperf > /dev/null || missing+=(dnsperf)
command -v ip > /dev/null || missing+=(iproute2)
command -v dig > /dev/null || missing+=(bind9-dnsutils)
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" > /dev/null || die "apt-get failed"
fi
if [ -z "${BIN:-}" ]; then
    log "building steerdns --release"
    (cd "$ROOT" && cargo build --release --quiet) || die "build failed"
    BIN=$TARGET_DIR/release/steerdns
fi
[ -x "$BIN" ] || die "no binary at $BIN"
mkdir -p "$OUT"
WORK=$(mktemp -d)

SERVER_PID=""
CGROUP=""
cleanup() {
    stop_server
    [ -n "$CGROUP" ] && rmdir "$CGROUP" 2> /dev/null
    ip netns del "$NS_S" 2> /dev/null
    ip netns del "$NS_C" 2> /dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "$CPU_MAX" ]; then
    # cgroup v1 (this machine) or v2: a group of its own, removed on exit.
    if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then
        CGROUP=/sys/fs/cgroup/cpu/steerdns-bench-$TAG
        mkdir "$CGROUP" || die "cannot make $CGROUP"
        echo 10000 > "$CGROUP/cpu.cfs_period_us"
        awk -v f="$CPU_MAX" 'BEGIN { printf "%d\n", f * 10000 }' > "$CGROUP/cpu.cfs_quota_us" ||
            die "cannot set the quota"
    elif [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        CGROUP=/sys/fs/cgroup/steerdns-bench-$TAG
        mkdir "$CGROUP" || die "cannot make $CGROUP"
        awk -v f="$CPU_MAX" 'BEGIN { printf "%d 10000\n", f * 10000 }' > "$CGROUP/cpu.max" ||
            die "cannot set cpu.max"
    else
        die "CPU_MAX needs the cpu cgroup controller"
    fi
    log "steerdns limited to $CPU_MAX of a CPU ($CGROUP)"
fi

# ------------------------------------------------------------------ 2. namespaces and configs
ip netns add "$NS_S" || die "cannot make a network namespace"
ip netns add "$NS_C" || die "cannot make a network namespace"
ip link add "$IF_S" type veth peer name "$IF_C" || die "cannot make a veth pair"
ip link set "$IF_S" netns "$NS_S"
ip link set "$IF_C" netns "$NS_C"
ip -n "$NS_S" addr add "$SERVER_IP/30" dev "$IF_S"
ip -n "$NS_C" addr add "$CLIENT_IP/30" dev "$IF_C"
for ns in "$NS_S" "$NS_C"; do ip -n "$ns" link set lo up; done
ip -n "$NS_S" link set "$IF_S" up
ip -n "$NS_C" link set "$IF_C" up

render_config() { # mode -> dir
    local mode=$1 d=$WORK/$1
    mkdir -p "$d/zones"
    cp "$CONF/zone.base" "$d/zones/steer.example.zone"
    cp "$CONF/steerdns/control.toml" "$d/"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin.token"
    chmod 600 "$d/admin.token"
    sed -e "s|listen = \[\"127.0.0.1:@PORT@\"\]|listen = [\"$SERVER_IP:53\"]|" \
        -e "s|@DIR@|$d|g" -e "s|@MMDB@|$ROOT/geoip/example.mmdb|g" \
        -e "s|127.0.0.1:@ADMIN_PORT@|$ADMIN|g" \
        "$CONF/steerdns/steerdns.toml.in" > "$d/steerdns.toml"
    # A feed with no region overloaded: the shield keeps every answer on its normal target.
    sed -e "s|@NOW@|$(date -u +%Y-%m-%dT%H:%M:%SZ)|" -e "s|@EU_WEST_LOAD@|100|" \
        "$CONF/steerdns/load.json.in" > "$d/load.json"
    if [ "$mode" = xdp ]; then
        printf '\n[server.xdp]\ninterface = "%s"\nports = [53]\nattach = "%s"\n' "$IF_S" "$ATTACH" \
            >> "$d/steerdns.toml"
    fi
}
render_config socket
render_config xdp

# ------------------------------------------------------------------ 3. server, checks, load
in_server() { ip netns exec "$NS_S" "$@"; }
in_client() { ip netns exec "$NS_C" "$@"; }
ask() { in_client dig +time=1 +tries=1 +short @"$SERVER_IP" "$@" 2> /dev/null; }

start_server() { # mode
    local mode=$1 i
    # Started directly (not through a shell function) so that $! is steerdns itself: `ip netns
    # exec` and taskset exec their command.
    ip netns exec "$NS_S" taskset -c "$SERVER_CPU" "$BIN" serve --config "$WORK/$mode/steerdns.toml" \
        > "$OUT/server.$mode.log" 2>&1 &
    SERVER_PID=$!
    # Threads started later inherit the group.
    [ -n "$CGROUP" ] && echo "$SERVER_PID" > "$CGROUP/cgroup.procs"
    for i in $(seq 1 100); do
        if grep -qx ready "$OUT/server.$mode.log" && [ -n "$(ask steer.example SOA)" ]; then
            [ "$(cat "/proc/$SERVER_PID/comm" 2> /dev/null)" = steerdns ] ||
                die "pid $SERVER_PID is not steerdns: its CPU would not be counted"
            return 0
        fi
        kill -0 "$SERVER_PID" 2> /dev/null || die "steerdns ($mode) exited: $(tail -5 "$OUT/server.$mode.log")"
        sleep 0.1
    done
    die "steerdns ($mode) did not answer within 10 s"
}

stop_server() {
    [ -n "$SERVER_PID" ] || return 0
    kill "$SERVER_PID" 2> /dev/null
    wait "$SERVER_PID" 2> /dev/null
    SERVER_PID=""
}

xdp_rx() { # -> answers received on the XDP queues so far
    in_server "$BIN" status --json --admin "$ADMIN" 2> /dev/null |
        python3 -c 'import json,sys; s=json.load(sys.stdin); print(sum(q["rx"] for q in (s.get("xdp") or {}).get("queues", [])))'
}

check_answers() { # mode
    local mode=$1 bad=0 before after
    [ "$mode" = xdp ] && before=$(xdp_rx)
    expect() { # what got want
        if [ "$2" != "$3" ]; then log "WRONG ($mode) $1: got '$2', want '$3'"; bad=1; fi
    }
    expect "www A" "$(ask www.steer.example A)" "$(ask www.steer.example A | head -1)"
    [ -n "$(ask www.steer.example A)" ] || { log "WRONG ($mode) www A: empty"; bad=1; }
    expect "app A ECS EU" "$(ask +subnet=2.1.1.0/24 app.steer.example A)" 198.51.100.1
    expect "app A ECS none" "$(ask +subnet=10.1.1.0/24 app.steer.example A)" 203.0.113.1
    case "$(ask wt.steer.example A)" in 192.0.2.100 | 192.0.2.101) ;; *) log "WRONG ($mode) wt A"; bad=1 ;; esac
    if [ "$mode" = xdp ]; then
        after=$(xdp_rx)
        [ "${after:-0}" -gt "${before:-0}" ] || { log "WRONG: xdp queues saw no query (rx $before -> $after)"; bad=1; }
    fi
    [ "$bad" = 0 ] || die "answers are wrong; not measuring"
}

ecs_option() { # a.b.c.0/24 -> dnsperf -E value (ECS, family 1, source /24, scope 0)
    local ip=${1%/*}
    local IFS=.
    # shellcheck disable=SC2086
    set -- $ip
    printf '8:00011800%02x%02x%02x' "$1" "$2" "$3"
}

echo "www.steer.example A" > "$WORK/q.static"
echo "app.steer.example A" > "$WORK/q.app"
echo "wt.steer.example A" > "$WORK/q.wt"
workload_args() {
    case $1 in
    static) echo "$WORK/q.static" ;;
    geo_eu) echo "$WORK/q.app -E $(ecs_option 2.1.1.0/24)" ;;
    geo_none) echo "$WORK/q.app -E $(ecs_option 10.1.1.0/24)" ;;
    weighted) echo "$WORK/q.wt" ;;
    *) die "unknown workload $1" ;;
    esac
}

proc_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2> /dev/null || echo 0; }
cpu_softirq() { # cpu-number -> its softirq ticks (/proc/stat)
    awk -v c="cpu$1" '$1 == c { print $8 }' /proc/stat
}
rx_ticks() { # softirq of every CPU but the server's + ksoftirqd on the server's CPU
    local total pid
    total=$(awk -v c="cpu$SERVER_CPU" '$1 ~ /^cpu[0-9]+$/ && $1 != c { s += $8 } END { print s + 0 }' /proc/stat)
    pid=$(pgrep -x "ksoftirqd/$SERVER_CPU")
    [ -n "$pid" ] && total=$((total + $(proc_ticks "$pid")))
    echo "$total"
}

HZ=$(getconf CLK_TCK)
ROWS=$OUT/rows.tsv
printf 'round\tmode\tworkload\tqps\tcompleted\tlost\tserver_cpu_s\trx_softirq_s\tclient_rx_s\tq_per_cpu_s\tq_per_server_cpu_s\n' > "$ROWS"

measure() { # round mode workload
    local r=$1 mode=$2 w=$3 args o s0 s1 x0 x1 c0 c1 completed lost qps
    read -r -a args <<< "$(workload_args "$w")"
    o=$OUT/dnsperf.$mode.$w.r$r.txt
    s0=$(proc_ticks "$SERVER_PID")
    x0=$(rx_ticks)
    c0=$(cpu_softirq "$SERVER_CPU")
    local perf_pid=""
    if [ -n "$PROFILE" ]; then
        perf record -a -g -e cpu-clock -F 499 -o "$OUT/perf.$mode.$w.data" -- sleep "$DUR" \
            > /dev/null 2>&1 &
        perf_pid=$!
    fi
    in_client taskset -c "$CLIENT_CPU" dnsperf -s "$SERVER_IP" -p 53 -d "${args[0]}" "${args[@]:1}" \
        -l "$DUR" -c "$CLIENTS" -q "$OUTSTANDING" -T 1 -t "$TIMEOUT" > "$o" 2>&1
    if [ -n "$perf_pid" ]; then
        wait "$perf_pid"
        # The server's threads, the client (whose sends run the server side's receive in
        # softirq) and the softirq threads; other processes on the machine are left out.
        perf report -i "$OUT/perf.$mode.$w.data" --no-children --sort comm,sym --stdio -g none \
            --percent-limit 0.2 2> /dev/null | grep -v '^#' | grep -v '^$' |
            grep -E ' (xdp-[0-9]+|udp-[0-9]+|steerdns|dnsperf|ksoftirqd/[0-9]+|swapper) ' \
            > "$OUT/profile.$mode.$w.txt"
        [ "$mode" = xdp ] && in_server "$BIN" status --admin "$ADMIN" 2> /dev/null |
            grep -A3 '^xdp' > "$OUT/xdp-status.$w.r$r.txt"
    fi
    s1=$(proc_ticks "$SERVER_PID")
    x1=$(rx_ticks)
    c1=$(cpu_softirq "$SERVER_CPU")
    completed=$(awk '/Queries completed:/ { print $3 }' "$o")
    lost=$(awk '/Queries lost:/ { print $3 }' "$o")
    qps=$(awk '/Queries per second:/ { printf "%d", $4 }' "$o")
    awk -v r="$r" -v m="$mode" -v w="$w" -v qps="${qps:-0}" -v c="${completed:-0}" -v l="${lost:-0}" \
        -v s=$((s1 - s0)) -v x=$((x1 - x0)) -v k=$((c1 - c0)) -v hz="$HZ" 'BEGIN {
            server = s / hz; rx = x / hz; client = k / hz
            if (client > server) client = server
            all = server + rx; own = server - client + rx
            printf "%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%d\t%d\n", r, m, w, qps, c, l,
                server, rx, client, (all > 0) ? c / all : 0, (own > 0) ? c / own : 0
        }' >> "$ROWS"
    log "  $mode $w: $(tail -1 "$ROWS" | cut -f4-11 | tr '\t' ' ')"
}

for r in $(seq 1 "$ROUNDS"); do
    modes="socket xdp"
    [ $((r % 2)) = 0 ] && modes="xdp socket"
    for mode in $modes; do
        log "round $r: $mode"
        start_server "$mode"
        check_answers "$mode"
        for w in $WORKLOADS; do measure "$r" "$mode" "$w"; done
        stop_server
    done
done

# ------------------------------------------------------------------ 4. table
python3 - "$ROWS" "$WORKLOADS" << 'EOF' | tee "$OUT/table.txt"
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
def med(mode, w, key):
    v = [float(r[key]) for r in rows if r["mode"] == mode and r["workload"] == w]
    return statistics.median(v) if v else 0.0
print(f"{'workload':10} {'socket qps':>10} {'xdp qps':>9} {'socket q/cpu-s':>14} {'xdp q/cpu-s':>12} {'ratio':>6}"
      f" {'server-only ratio':>17} {'lost s/x':>9}")
for w in sys.argv[2].split():
    s, x = med("socket", w, "q_per_cpu_s"), med("xdp", w, "q_per_cpu_s")
    so, xo = med("socket", w, "q_per_server_cpu_s"), med("xdp", w, "q_per_server_cpu_s")
    lost = f"{int(med('socket', w, 'lost'))}/{int(med('xdp', w, 'lost'))}"
    print(f"{w:10} {med('socket', w, 'qps'):10.0f} {med('xdp', w, 'qps'):9.0f} {s:14.0f} {x:12.0f} "
          f"{(x / s if s else 0):6.2f} {(xo / so if so else 0):17.2f} {lost:>9}")
EOF
log "rows: $ROWS"
