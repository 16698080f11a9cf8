#!/usr/bin/env bash
# benches/encrypted.sh: DNS over TLS against UDP on the same steerdns process, same queries,
# same run. The figure is completed queries per server-CPU-second (utime+stime of the server
# process from /proc), so the two transports compare by what each costs the server, whatever
# the load generator manages on this machine.
#
#   benches/encrypted.sh                 # build --release if needed, measure, print the table
#   DUR=5 ROUNDS=1 benches/encrypted.sh
#
# dnsperf (Debian's, `-m udp` and `-m dot`) runs CLIENTS connections of OUTSTANDING queries in
# flight each; DoT connections are reused for the whole run (max_queries_per_connection is
# raised above what a run sends), so the TLS handshakes are a negligible part. The server is
# pinned to CPU $SERVER_CPU with one UDP worker, dnsperf to CPU $CLIENT_CPU. Transports
# alternate inside each round, the order reversed every other round; the table gives the median
# over rounds. Queries: a static name, a CNAME into the platform zone, a geo answer chosen by
# ECS, a weighted profile, a negative answer (benches/configs is not needed: the bundled
# example config and zones are used as they are, with [server.tls] added).
#
# Knobs: DUR=10 ROUNDS=3 CLIENTS=4 OUTSTANDING=100 SERVER_CPU=0 CLIENT_CPU=1 BIN=... OUT=dir
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DUR=${DUR:-10}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-4}
OUTSTANDING=${OUTSTANDING:-100}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=${BIN:-$TARGET_DIR/release/steerdns}
OUT=${OUT:-$TARGET_DIR/bench-encrypted/$(date -u +%Y%m%dT%H%M%SZ)}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

need=()
command -v dnsperf >/dev/null 2>&1 || need+=(dnsperf)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v kdig >/dev/null 2>&1 || need+=(knot-dnsutils)
if ((${#need[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi
usage=$(dnsperf -h 2>&1 || true)
[[ $usage == *"udp, tcp, dot"* ]] || { log "this dnsperf has no -m dot"; exit 1; }
if [[ ! -x $BIN ]]; then
    log "building steerdns --release"
    (cd "$ROOT" && cargo build --release --quiet)
fi

mkdir -p "$OUT"
WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj /CN=ns1.example.net -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null

# The bundled example with absolute paths, one UDP worker, RRL off (one client address sends
# everything), and DoT.
sed -e "s|^zones = \"zones\"|zones = \"$ROOT/zones\"|" \
    -e "s|^database = \"geoip/example.mmdb\"|database = \"$ROOT/geoip/example.mmdb\"|" \
    -e "s|^file = \"control.toml\"|file = \"$ROOT/control.toml\"|" \
    -e "s|^token_file = \"admin.token\"|token_file = \"$WORK/admin.token\"|" \
    -e "s|^\\[server\\]|[server]\nudp_workers = 1|" \
    "$ROOT/steerdns.toml" >"$WORK/steerdns.toml"
grep -q "^zones = \"$ROOT/zones\"" "$WORK/steerdns.toml" || { log "steerdns.toml changed shape"; exit 1; }
cat >>"$WORK/steerdns.toml" <<EOF

[server.tls]
cert = "$WORK/cert.pem"
key = "$WORK/key.pem"
dot = ["127.0.0.1:0"]
max_connections_per_client = 64
max_queries_per_connection = 100000000
idle_timeout_secs = 60
EOF

cat >"$WORK/queries" <<EOF
example.com SOA
www.example.com A
gw.example.com A
warm.example.com A
nope.example.com A
EOF

taskset -c "$SERVER_CPU" "$BIN" serve --config "$WORK/steerdns.toml" --listen 127.0.0.1:0 \
    --admin-listen off >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
for _ in $(seq 100); do
    grep -q '^ready' "$WORK/server.out" 2>/dev/null && break
    sleep 0.1
done
grep -q '^ready' "$WORK/server.out" || { cat "$WORK/server.err" >&2; exit 1; }
UDP=$(awk '/^listening on/ {print $3; exit}' "$WORK/server.out")
DOT=$(awk '/^dot on/ {print $3; exit}' "$WORK/server.out")
log "steerdns pid $SERVER_PID: udp $UDP, dot $DOT"

# Both transports must give the same answer before anything is measured.
for q in "gw.example.com A +subnet=81.2.69.0/24" "example.com SOA"; do
    # shellcheck disable=SC2086
    a=$(kdig @127.0.0.1 -p "${UDP##*:}" $q +short)
    # shellcheck disable=SC2086
    b=$(kdig @127.0.0.1 -p "${DOT##*:}" +tls $q +short)
    [[ -n $a && $a == "$b" ]] || { log "answers differ for $q: udp '$a' dot '$b'"; exit 1; }
done

ticks() { # utime+stime of the server process (all threads), in clock ticks
    local s
    s=$(cat "/proc/$SERVER_PID/stat")
    s=${s##*) }
    local f=($s)
    echo $((f[11] + f[12]))
}
HZ=$(getconf CLK_TCK)

run() { # run MODE ROUND -> appends "mode round completed cpu_s" to results
    local mode=$1 round=$2 port=${UDP##*:}
    [[ $mode == dot ]] && port=${DOT##*:}
    local before after
    before=$(ticks)
    taskset -c "$CLIENT_CPU" dnsperf -m "$mode" -s 127.0.0.1 -p "$port" -d "$WORK/queries" \
        -l "$DUR" -c "$CLIENTS" -q "$OUTSTANDING" -t 2 >"$OUT/dnsperf-$mode-$round.txt" 2>&1
    after=$(ticks)
    local completed
    completed=$(awk '/Queries completed:/ {print $3; exit}' "$OUT/dnsperf-$mode-$round.txt")
    local cpu
    cpu=$(awk -v t=$((after - before)) -v hz="$HZ" 'BEGIN {printf "%.2f", t / hz}')
    echo "$mode $round $completed $cpu" >>"$OUT/results"
    log "$mode round $round: $completed queries, server CPU $cpu s"
}

: >"$OUT/results"
for round in $(seq "$ROUNDS"); do
    if ((round % 2)); then order="udp dot"; else order="dot udp"; fi
    for mode in $order; do run "$mode" "$round"; done
done

python3 - "$OUT/results" "$DUR" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
dur = float(sys.argv[2])
def figures(mode):
    rs = [(int(c), float(cpu)) for m, _, c, cpu in rows if m == mode]
    qps = statistics.median(c / dur for c, _ in rs)
    per_cpu = statistics.median(c / cpu for c, cpu in rs if cpu > 0)
    cpu = statistics.median(cpu / dur for _, cpu in rs)
    return qps, cpu, per_cpu
udp, dot = figures("udp"), figures("dot")
print(f"{'transport':10} {'qps':>10} {'server CPU/s':>13} {'q per CPU-s':>12} {'vs UDP':>7}")
for name, (qps, cpu, per) in (("udp", udp), ("dot", dot)):
    print(f"{name:10} {qps:10.0f} {cpu:13.2f} {per:12.0f} {per / udp[2]:7.2f}")
EOF
log "raw dnsperf output in $OUT"
