# benches/lib.sh: what the benchmark scripts share (source it): logging, the generated
# zone of N names, and stopping a server started in a session of its own (setsid) by its id.

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FATAL: $*"; exit 1; }

# The pids of the processes in session `sid` (the server and any taster child).
session_pids() {
    cat /proc/[0-9]*/stat 2> /dev/null | awk -v sid="$1" '{ pid = $1; sub(/^.*\) /, ""); if ($4 == sid) print pid }'
}

# Stops session `$SESSION` (TERM, then KILL after 10 s) and clears it.
stop_server() {
    [ -n "${SESSION:-}" ] || return 0
    local p
    for p in $(session_pids "$SESSION"); do kill -TERM "$p" 2> /dev/null; done
    for _ in $(seq 1 50); do
        [ -z "$(session_pids "$SESSION")" ] && break
        sleep 0.2
    done
    for p in $(session_pids "$SESSION"); do kill -KILL "$p" 2> /dev/null; done
    SESSION=""
}

# The zone big.example. with N names h0..h(N-1), one A record each, on stdout.
big_zone() {
    awk -v n="$1" 'BEGIN {
        print "$ORIGIN big.example."; print "$TTL 300"
        print "@ IN SOA ns1.big.example. hostmaster.big.example. 1 3600 600 604800 300"
        print "@ IN NS ns1"; print "ns1 IN A 192.0.2.53"
        for (i = 0; i < n; i++)
            printf "h%d IN A 10.%d.%d.%d\n", i, int(i / 65536) % 256, int(i / 256) % 256, i % 256
    }'
}

# The common start of a bench script: OUT (unless set) under target/bench-$1/<time>, a WORK
# folder under /tmp removed at exit with the server session stopped, and BIN built unless set.
bench_start() {
    OUT=${OUT:-${CARGO_TARGET_DIR:-$ROOT/target}/bench-$1/$(date -u +%Y%m%dT%H%M%SZ)}
    mkdir -p "$OUT"
    WORK=$(mktemp -d "/tmp/steerdns-$1.XXXXXX")
    SESSION=""
    trap 'stop_server; rm -rf "$WORK"' EXIT
    trap 'exit 130' INT TERM
    if [ -z "${BIN:-}" ]; then
        (cd "$ROOT" && cargo build --release --quiet) || die "cargo build failed"
        BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/steerdns
    fi
}

# Fails unless every tool named is installed.
need() {
    local t
    for t in "$@"; do
        command -v "$t" > /dev/null || die "missing $t (.ci/run installs the bench tools)"
    done
}

# nsd_conf DIR PORT ZONEFILE [CONTROL_SOCKET]: writes DIR/nsd.conf, an NSD serving big.example
# from ZONEFILE on 127.0.0.1:PORT in the foreground layout the zone benches use (no chroot, no
# database, no RRL); with CONTROL_SOCKET, nsd-control on that unix socket.
nsd_conf() {
    local dir=$1 port=$2 zonefile=$3 control=${4:-} remote
    if [ -n "$control" ]; then
        remote="    control-enable: yes
    control-interface: \"$control\""
    else
        remote="    control-enable: no"
    fi
    cat > "$dir/nsd.conf" << NSDCONF
server:
    ip-address: 127.0.0.1@$port
    server-count: 1
    reuseport: no
    do-ip6: no
    username: ""
    chroot: ""
    database: ""
    zonelistfile: "$dir/zone.list"
    xfrdfile: "$dir/xfrd.state"
    xfrdir: "$dir"
    pidfile: "$dir/nsd.pid"
    logfile: "$dir/nsd.log"
    rrl-ratelimit: 0
remote-control:
$remote
zone:
    name: big.example
    zonefile: "$zonefile"
NSDCONF
}
