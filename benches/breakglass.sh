#!/usr/bin/env bash
# benches/breakglass.sh: how long a break-glass `steerdns weight set` takes with a big zone
# loaded (issue 29 item 3, issue 32), the CLI's own time and command-start-to-served, for the
# two paths the CLI has, measured in the same run on the same server:
#
#   server      the CLI sends the edit to the running server (POST /v1/control/edit), which
#               tastes it against what it serves (unchanged zones shared) and serves it;
#   in-process  the CLI cannot reach the server (`--admin` at a closed port), so it loads every
#               zone itself before writing the file, and the server picks the file up.
#
#   benches/breakglass.sh                  # builds steerdns --release if BIN is not given
#   NAMES=1000000 ROUNDS=5 benches/breakglass.sh
#
# Each round flips profile `wt` of the benchmark config between a=0/b=100 and a=100/b=0 and
# polls `wt.steer.example A` every 2 ms from a client subnet until the answer shows the flip.
# Only 127.0.0.1; the server is stopped by its session id.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CONF=$ROOT/benches/configs
NAMES=${NAMES:-1000000}
ROUNDS=${ROUNDS:-5}
PORT=${PORT:-15530}
ADMIN_PORT=${ADMIN_PORT:-15531}
CLOSED_PORT=${CLOSED_PORT:-15539}
MMDB=${MMDB:-$ROOT/geoip/example.mmdb}
WORK=$(mktemp -d /tmp/steerdns-breakglass.XXXXXX)
SESSION=""

# shellcheck source=benches/lib.sh
. "$ROOT/benches/lib.sh"
cleanup() { stop_server; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet) || die "cargo build failed"
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/steerdns
fi
for t in python3 setsid; do command -v "$t" > /dev/null || die "missing $t"; done

# The benchmark config with a zone of NAMES names beside its own.
d=$WORK/case
mkdir -p "$d/zones"
cp "$CONF/zone.base" "$d/zones/steer.example.zone"
big_zone "$NAMES" > "$d/zones/big.example.zone"
sed -e "s|@PORT@|$PORT|g" -e "s|@ADMIN_PORT@|$ADMIN_PORT|g" -e "s|@MMDB@|$MMDB|g" \
    "$CONF/steerdns/steerdns.toml.in" > "$d/steerdns.toml"
cp "$CONF/steerdns/control.toml" "$d/"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin.token"
chmod 600 "$d/admin.token"

log "starting the server on $NAMES names"
setsid "$BIN" serve --config "$d/steerdns.toml" > "$WORK/serve.log" 2>&1 < /dev/null &
SESSION=$!
for _ in $(seq 1 600); do
    grep -q "ready" "$WORK/serve.log" && break
    kill -0 "$SESSION" 2> /dev/null || die "the server exited: $(tail -5 "$WORK/serve.log")"
    sleep 0.1
done
grep -q "ready" "$WORK/serve.log" || die "the server did not get ready"

# One flip: runs the CLI, polls until served; prints "cli_ms served_ms".
flip() { # a-weight b-weight expected-address extra-cli-args...
    python3 - "$PORT" "$@" "$BIN" "$d/steerdns.toml" << 'PY'
import socket, struct, subprocess, sys, time
port, a, b, want = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
extra, bin_, config = sys.argv[5:-2], sys.argv[-2], sys.argv[-1]
want = socket.inet_aton(want)
q = struct.pack(">HHHHHH", 0x5151, 0x0000, 1, 0, 0, 0)
q += b"".join(bytes([len(l)]) + l.encode() for l in "wt.steer.example".split(".")) + b"\0"
q += struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.002)
t0 = time.monotonic()
cmd = [bin_, "weight", "set", "wt", f"a={a}", f"b={b}", "--config", config, *extra]
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
cli_ms = served_ms = None
while time.monotonic() - t0 < 120:
    if cli_ms is None and p.poll() is not None:
        cli_ms = (time.monotonic() - t0) * 1000
    if served_ms is None:
        try:
            s.sendto(q, ("127.0.0.1", port))
            r = s.recv(512)
            if r[:2] == q[:2] and want in r[12:]:
                served_ms = (time.monotonic() - t0) * 1000
        except OSError:
            pass
    if cli_ms is not None and served_ms is not None:
        break
if p.poll() is None or p.returncode != 0:
    sys.exit(1)
print(f"{cli_ms:.0f} {served_ms:.0f}")
PY
}

R=$WORK/results
for path in server in-process; do
    extra=()
    [ "$path" = in-process ] && extra=(--admin "127.0.0.1:$CLOSED_PORT")
    for i in $(seq 1 "$ROUNDS"); do
        flips=$((${flips:-0} + 1)) # alternate across both paths: every round is a real flip
        if ((flips % 2)); then out=$(flip 0 100 192.0.2.101 "${extra[@]}"); else out=$(flip 100 0 192.0.2.100 "${extra[@]}"); fi
        [ -n "$out" ] || die "round $i ($path): the flip failed or was not served (log: $WORK/serve.log)"
        echo "$path $out" >> "$R"
        log "$path round $i: cli/served ms = $out"
    done
done
load=$(cut -d' ' -f1-3 /proc/loadavg)
printf 'weight set with %d names loaded, %d rounds per path (load average %s):\n' "$NAMES" "$ROUNDS" "$load"
python3 - "$R" << 'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for path in ("server", "in-process"):
    cli = [int(r[1]) for r in rows if r[0] == path]
    served = [int(r[2]) for r in rows if r[0] == path]
    print(f"  {path:<10}  CLI {statistics.median(cli):6.0f} ms (median; min {min(cli)}, max {max(cli)})"
          f"   command start to served {statistics.median(served):6.0f} ms (median; min {min(served)}, max {max(served)})")
PY
