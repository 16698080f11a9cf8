#!/usr/bin/env bash
# benches/tenant_changes.sh: issue 30's sustained tenant changes through the API while the
# server answers at full rate, on the bundled example with TENANTS tenants (one name each):
#
#   BIN=target/release/steerdns TENANTS=100000 DUR=10 CLIENTS=32 benches/tenant_changes.sh
#
# Two runs of DUR seconds with the same dnsperf load (random tenant names, as fast as it goes):
#   quiet     no changes
#   changing  CLIENTS concurrent API clients PUT random tenants' documents (a new TTL each) as
#             fast as the server takes them; after each PUT returns, the client asks the
#             server for that name over UDP until the answer carries the new TTL: the lag from
#             the API returning to the change being served.
# Printed: changes/s, PUT latency p50/p99, served-lag p50/p99/max, qps and lost queries of
# both runs and their ratio. The server, dnsperf and the clients share this machine's cores
# (stated with the figures). Only 127.0.0.1; every process is stopped by its session.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/lib.sh"
TENANTS=${TENANTS:-100000}
DUR=${DUR:-10}
CLIENTS=${CLIENTS:-32}
PORT=${PORT:-15560}
ADMIN_PORT=${ADMIN_PORT:-15561}
bench_start tenant-changes
need python3 setsid curl dnsperf

D=$WORK/site
mkdir -p "$D/tenants"
cp -r "$ROOT/zones" "$ROOT/geoip" "$ROOT/control.toml" "$ROOT/steerdns.toml" "$D/"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$D/admin.token"
chmod 600 "$D/admin.token"
python3 - "$D/tenants" "$TENANTS" "$WORK/queries" << 'EOF'
import os, sys
d, n, q = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(q, "w") as queries:
    for i in range(n):
        with open(os.path.join(d, f"t{i:07d}.toml"), "w") as f:
            f.write(f'names = ["t{i:07d}.edge.example.net."]\nttl = 120\n')
    import random
    rng = random.Random(7)
    for _ in range(100000):
        queries.write(f"t{rng.randrange(n):07d}.edge.example.net A\n")
EOF

setsid "$BIN" serve --config "$D/steerdns.toml" --listen "127.0.0.1:$PORT" \
    --admin-listen "127.0.0.1:$ADMIN_PORT" > "$OUT/serve.log" 2>&1 &
SESSION=$!
served() {
    curl -s "http://127.0.0.1:$ADMIN_PORT/v1/status" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["tenants"]["served"])' 2> /dev/null
}
for _ in $(seq 1 3600); do
    [ "$(served)" = "$TENANTS" ] && break
    sleep 0.1
done
[ "$(served)" = "$TENANTS" ] || { cat "$OUT/serve.log" >&2; die "tenants not served"; }
log "$TENANTS tenants served"

load() { # label: dnsperf for DUR s, its summary in $OUT/dnsperf.label
    dnsperf -s 127.0.0.1 -p "$PORT" -d "$WORK/queries" -l "$DUR" -c 4 -Q 1000000 -q 200 \
        > "$OUT/dnsperf.$1" 2>&1
}
qps() { awk '/Queries per second/ { print $4 }' "$OUT/dnsperf.$1"; }
lost() { awk '/Queries lost/ { print $3 }' "$OUT/dnsperf.$1"; }

load quiet
log "quiet: $(qps quiet) qps, $(lost quiet) lost"

python3 - "$ADMIN_PORT" "$(cat "$D/admin.token")" "$CLIENTS" "$DUR" "$TENANTS" "$PORT" > "$OUT/changes.json" << 'EOF' &
import http.client, json, random, socket, struct, sys, threading, time
port, token, clients, dur, n, dns = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
put_ms, lag_ms, errors = [], [], []
lock = threading.Lock()
stop = time.monotonic() + dur

def query(sock, name, qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0" + struct.pack(">HH", 1, 1)
    sock.sendto(q, ("127.0.0.1", dns))
    while True:
        r = sock.recv(512)
        if r[:2] == q[:2]:
            break
    # the first answer's TTL: after the question (len(q) - 12 bytes), name pointer 2, type 2, class 2
    at = len(q)
    return struct.unpack(">I", r[at + 6:at + 10])[0] if struct.unpack(">H", r[6:8])[0] else None

def client(k):
    rng = random.Random(k)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(0.5)
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    qid = k << 8
    while time.monotonic() < stop:
        i = rng.randrange(n)
        ttl = rng.randrange(1000, 60000)
        name = f"t{i:07d}"
        body = f'names = ["{name}.edge.example.net."]\nttl = {ttl}\n'
        t0 = time.monotonic()
        try:
            c.request("PUT", f"/v1/tenants/{name}", body, {"Authorization": f"Bearer {token}", "Content-Type": "application/toml"})
            r = c.getresponse(); r.read()
        except Exception as e:
            with lock: errors.append(str(e))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            continue
        t1 = time.monotonic()
        if r.status not in (200, 201):
            with lock: errors.append(f"HTTP {r.status}")
            continue
        seen = None
        while time.monotonic() - t1 < 2:
            qid = (qid + 1) & 0xffff
            try:
                if query(sock, f"{name}.edge.example.net", qid) == ttl:
                    seen = time.monotonic()
                    break
            except OSError:
                pass
        with lock:
            put_ms.append((t1 - t0) * 1000)
            lag_ms.append((seen - t1) * 1000 if seen else float("inf"))

threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
t0 = time.monotonic()
for t in threads: t.start()
for t in threads: t.join()
wall = time.monotonic() - t0
def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float("nan")
print(json.dumps({
    "changes": len(put_ms), "per_second": len(put_ms) / wall, "errors": len(errors), "first_errors": errors[:3],
    "put_p50": pct(put_ms, 0.5), "put_p99": pct(put_ms, 0.99),
    "lag_p50": pct(lag_ms, 0.5), "lag_p99": pct(lag_ms, 0.99), "lag_max": max(lag_ms) if lag_ms else None,
    "never_seen": sum(1 for x in lag_ms if x == float("inf")),
}))
EOF
CHANGER=$!
load changing
wait "$CHANGER"
log "changing: $(qps changing) qps, $(lost changing) lost; $(cat "$OUT/changes.json")"
STATUS=$(curl -s "http://127.0.0.1:$ADMIN_PORT/v1/status")

R=$OUT/tenant_changes.md
python3 - "$OUT/changes.json" "$(qps quiet)" "$(lost quiet)" "$(qps changing)" "$(lost changing)" "$TENANTS" "$CLIENTS" "$DUR" "$STATUS" << 'EOF' | tee "$R"
import json, sys
c = json.load(open(sys.argv[1]))
qq, lq, qc, lc, n, clients, dur = float(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7], sys.argv[8]
tastes = json.loads(sys.argv[9])["tenants"]["tastes"]
print(f"| {n} tenants, {clients} API clients, {dur} s | changes/s | PUT p50 / p99 | PUT return → served p50 / p99 / max | qps | queries lost |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
print(f"| no changes | – | – | – | {qq:,.0f} | {lq} |")
print(f"| changing | {c['per_second']:,.0f} ({c['changes']} changes, {c['errors']} errors) | {c['put_p50']:.1f} / {c['put_p99']:.1f} ms | {c['lag_p50']:.2f} / {c['lag_p99']:.2f} / {c['lag_max']:.2f} ms | {qc:,.0f} ({qc / qq:.2f}x) | {lc} |")
print()
print(f"taster runs for the whole run: {tastes}; changes never seen served: {c['never_seen']}")
EOF
log "table in $R"
