#!/usr/bin/env bash
# benches/fleet_convergence.sh: how long a break-glass flip takes to reach every node of a
# fleet (etcd + N steerdns nodes on loopback), against one node without a fleet (the control
# file) measured in the same run.
#
#   benches/fleet_convergence.sh                  # 3 and 10 nodes; builds --release if BIN unset
#   SIZES="3 10 20" FLIPS=20 benches/fleet_convergence.sh
#
# Per flip: `steerdns weight set critical ...` through node 1's config (it writes etcd by CAS,
# then waits until every live node's registry entry says it serves the new revision), then
# every node is asked `critical.example.com A` over UDP until all answer the new way.
# Reported per size (medians and max over FLIPS): the command's duration (write + its own
# wait), the time from the command's return until every node answers the new way, and the
# whole flip (command start -> every node answers). The baseline is the same flip on one node
# in file mode (the command writes the control file and waits for that server).
# Only 127.0.0.1, kernel-chosen ports; every process started here is stopped.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZES=${SIZES:-"3 10"}
FLIPS=${FLIPS:-10}
command -v etcd >/dev/null || { echo "etcd is needed: apt-get install etcd-server" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/steerdns
fi
WORK=$(mktemp -d /tmp/steerdns-fleet-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

python3 - "$ROOT" "$BIN" "$WORK" "$SIZES" "$FLIPS" <<'PY'
import os, shutil, socket, statistics, struct, subprocess, sys, time

root, binary, work, sizes, flips = sys.argv[1], sys.argv[2], sys.argv[3], [int(s) for s in sys.argv[4].split()], int(sys.argv[5])
procs = []

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def query():
    qname = b"".join(bytes([len(l)]) + l.encode() for l in "critical.example.com".split(".")) + b"\0"
    return struct.pack(">HHHHHH", 4242, 0, 1, 0, 0, 0) + qname + struct.pack(">HH", 1, 1)

ALT, FRONT = b"\x03cdn\x07example\x03org", b"\x04edge\x07example\x03net"
Q = query()

def answer(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(0.5)
    try:
        s.sendto(Q, addr); data, _ = s.recvfrom(4096)
    except OSError:
        return None
    finally:
        s.close()
    return "alt" if ALT in data else "front" if FRONT in data else None

def start_etcd(d):
    cp, pp = free_port(), free_port()
    c, p = f"http://127.0.0.1:{cp}", f"http://127.0.0.1:{pp}"
    proc = subprocess.Popen(["etcd", "--name", "b", "--data-dir", os.path.join(d, "etcd"),
        "--listen-client-urls", c, "--advertise-client-urls", c, "--listen-peer-urls", p,
        "--initial-advertise-peer-urls", p, "--initial-cluster", f"b={p}",
        "--logger", "zap", "--log-outputs", "stderr", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(proc)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", cp), 0.2).close(); return c
        except OSError:
            time.sleep(0.05)
    sys.exit("etcd did not start")

def start_node(d, name, fleet):
    os.makedirs(os.path.join(d, "geoip"))
    shutil.copytree(os.path.join(root, "zones"), os.path.join(d, "zones"))
    shutil.copy(os.path.join(root, "geoip/example.mmdb"), os.path.join(d, "geoip"))
    for f in ("control.toml", "steerdns.toml", "admin.token"):
        shutil.copy(os.path.join(root, f), d)
    if fleet:
        with open(os.path.join(d, "steerdns.toml"), "a") as f:
            f.write(f'\n[fleet]\netcd = ["{fleet}"]\nprefix = "/bench"\nconverge_timeout_secs = 10\n')
    proc = subprocess.Popen([binary, "serve", "--config", os.path.join(d, "steerdns.toml"),
        "--node", name, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"] if fleet else
        [binary, "serve", "--config", os.path.join(d, "steerdns.toml"),
        "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "STEERDNS_LOG": "error"})
    procs.append(proc)
    dns = admin = None
    for line in proc.stdout:
        if line.startswith("listening on "): dns = line.split()[2]
        if line.startswith("admin on http://"): admin = line.strip()[len("admin on http://"):]
        if line.startswith("ready"): break
    host, port = dns.rsplit(":", 1)
    return (host, int(port)), admin, os.path.join(d, "steerdns.toml")

def run(label, nodes, fleet):
    config, admin0 = nodes[0][2], nodes[0][1]
    cmds, gaps, totals = [], [], []
    for i in range(flips):
        want = "alt" if i % 2 == 0 else "front"
        weights = ["frontdoor=0", "alt-cdn=100"] if want == "alt" else ["frontdoor=100", "alt-cdn=0"]
        t0 = time.perf_counter()
        out = subprocess.run([binary, "weight", "set", "critical", *weights, "--config", config]
            + ([] if fleet else ["--admin", admin0]), capture_output=True, text=True)
        t1 = time.perf_counter()
        if out.returncode != 0:
            sys.exit(f"{label}: weight set failed:\n{out.stdout}{out.stderr}")
        pending = [n[0] for n in nodes]
        while pending:
            pending = [a for a in pending if answer(a) != want]
            if time.perf_counter() - t1 > 10:
                sys.exit(f"{label}: {len(pending)} node(s) never answered {want}")
        t2 = time.perf_counter()
        cmds.append((t1 - t0) * 1000); gaps.append((t2 - t1) * 1000); totals.append((t2 - t0) * 1000)
    med = statistics.median
    print(f"{label:<22} command {med(cmds):7.1f} ms (max {max(cmds):7.1f})   return->all answer "
          f"{med(gaps):6.1f} ms (max {max(gaps):6.1f})   whole flip {med(totals):7.1f} ms (max {max(totals):7.1f})")
    return med(totals)

def stop_all():
    for p in procs:
        p.kill(); p.wait()
    procs.clear()

try:
    print(f"{flips} flips each; medians (max)")
    base_dir = os.path.join(work, "single")
    baseline = run("1 node, control file", [start_node(base_dir, "single", None)], None)
    stop_all()
    for n in sizes:
        d = os.path.join(work, f"fleet{n}")
        os.makedirs(d)
        endpoint = start_etcd(d)
        nodes = [start_node(os.path.join(d, f"ns{i}"), f"ns{i}", endpoint) for i in range(1, n + 1)]
        total = run(f"{n} nodes, etcd", nodes, endpoint)
        print(f"{'':<22} whole flip = {total / baseline:.2f}x the single node's")
        stop_all()
finally:
    stop_all()
PY
