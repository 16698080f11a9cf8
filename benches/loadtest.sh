#!/usr/bin/env bash
# Quick loopback load test: steerdns against NSD (the simplest fast baseline) in the same run.
# Each server is pinned to CPU 0 with one worker, dnsperf to CPU 1; the load generator saturates
# its core, so the fair figure is queries per server CPU-second. Bounded: DUR seconds per run,
# 127.0.0.1 only, every process started here is stopped by its session.
#
#   benches/loadtest.sh            # DUR=10 ROUNDS=2
#   DUR=5 ROUNDS=1 benches/loadtest.sh
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${DUR:-10}
ROUNDS=${ROUNDS:-2}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PORT_STEER=${PORT_STEER:-15400}
PORT_NSD=${PORT_NSD:-15401}

for tool in dnsperf nsd dig taskset; do
    command -v "$tool" >/dev/null || { echo "installing $tool"; apt-get install -y -qq dnsperf nsd bind9-dnsutils util-linux >/dev/null; }
done
cargo build --release --quiet
BIN=$PWD/target/release/steerdns

WORK=$(mktemp -d /tmp/steerdns-load.XXXXXX)
SESSIONS=()
cleanup() {
    for sid in "${SESSIONS[@]}"; do pkill -TERM -s "$sid" 2>/dev/null || true; done
    sleep 0.5
    for sid in "${SESSIONS[@]}"; do pkill -KILL -s "$sid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

cp zones/*.zone "$WORK/"
cat > "$WORK/steerdns.toml" <<CONF
[server]
listen = ["127.0.0.1:$PORT_STEER"]
zones = "$WORK"
udp_workers = 1
CONF
cat > "$WORK/nsd.conf" <<CONF
server:
    ip-address: 127.0.0.1@$PORT_NSD
    server-count: 1
    reuseport: no
    do-ip6: no
    username: ""
    chroot: ""
    zonesdir: "$WORK"
    database: ""
    zonelistfile: "$WORK/zone.list"
    xfrdfile: "$WORK/xfrd.state"
    xfrdir: "$WORK"
    pidfile: "$WORK/nsd.pid"
    logfile: "$WORK/nsd.log"
    minimal-responses: yes
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
remote-control:
    control-enable: no
zone:
    name: example.com
    zonefile: "$WORK/example.com.zone"
zone:
    name: edge.example.net
    zonefile: "$WORK/edge.example.net.zone"
CONF

# Static workload: names that exist, answered from precompiled wire answers.
for i in $(seq 1 100); do
    echo "www.example.com A"; echo "mail.example.com A"; echo "example.com SOA"; echo "ns1.edge.example.net AAAA"
done > "$WORK/static.q"

start() { # name port command... -> session id
    local name=$1 port=$2; shift 2
    setsid taskset -c "$SERVER_CPU" "$@" >"$WORK/$name.out" 2>&1 &
    local pid=$!
    for _ in $(seq 1 50); do
        if dig @127.0.0.1 -p "$port" example.com SOA +short +time=1 +tries=1 >/dev/null 2>&1; then
            echo "$pid"; return
        fi
        sleep 0.1
    done
    echo "$name did not start; its output:" >&2; cat "$WORK/$name.out" >&2; exit 1
}

session_ticks() { # utime+stime of every process in session $SID
    local total=0
    for f in /proc/[0-9]*/stat; do
        local s; s=$(cat "$f" 2>/dev/null) || continue
        s=${s##*) }
        local fields=($s)
        if [ "${fields[3]}" = "$SID" ]; then total=$((total + fields[11] + fields[12])); fi
    done
    echo $total
}

SID_STEER=$(start steerdns "$PORT_STEER" "$BIN" serve --config "$WORK/steerdns.toml")
SESSIONS+=("$SID_STEER")
SID_NSD=$(start nsd "$PORT_NSD" nsd -d -c "$WORK/nsd.conf")
SESSIONS+=("$SID_NSD")

echo "check: steerdns $(dig @127.0.0.1 -p $PORT_STEER www.example.com A +short | tr '\n' ' ')"
echo "check: nsd      $(dig @127.0.0.1 -p $PORT_NSD www.example.com A +short | tr '\n' ' ')"

HZ=$(getconf CLK_TCK)
printf '\n%-9s %-5s %10s %8s %14s %6s\n' server round qps cpu_s qps_per_cpu_s lost
declare -A BEST
for round in $(seq 1 "$ROUNDS"); do
    for server in nsd steerdns; do
        if [ $server = nsd ]; then SID=$SID_NSD; PORT=$PORT_NSD; else SID=$SID_STEER; PORT=$PORT_STEER; fi
        t0=$(session_ticks)
        out=$(taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/static.q" -l "$DUR" -c 4 -T 1 -q 200 -t 1 2>&1)
        t1=$(session_ticks)
        qps=$(awk '/Queries per second/ {print $4}' <<<"$out")
        lost=$(awk '/Queries lost/ {print $3}' <<<"$out")
        cpu=$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" 'BEGIN {printf "%.2f", (b-a)/hz}')
        per=$(awk -v q="$qps" -v d="$DUR" -v c="$cpu" 'BEGIN {if (c>0) printf "%.0f", q*d/c; else print "-"}')
        printf '%-9s %-5s %10.0f %8s %14s %6s\n' "$server" "$round" "$qps" "$cpu" "$per" "$lost"
        if [ "$per" != "-" ] && [ "${per%.*}" -gt "${BEST[$server]:-0}" ]; then BEST[$server]=$per; fi
    done
done
echo
awk -v s="${BEST[steerdns]:-0}" -v n="${BEST[nsd]:-1}" 'BEGIN {printf "best queries per server CPU-second: steerdns %d, nsd %d, ratio steerdns/nsd %.2f\n", s, n, s/n}'
