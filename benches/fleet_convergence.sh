#!/usr/bin/env bash
# benches/fleet_convergence.sh: how long a break-glass flip takes to reach every node of a
# fleet (etcd + N steerdns nodes on loopback), against one node without a fleet (the control
# file) measured in the same run.
#
#   benches/fleet_convergence.sh                  # 3 and 10 nodes; builds --release if BIN unset
#   SIZES="3 10 20" FLIPS=20 benches/fleet_convergence.sh
#   SIZES="" ROLLOUT_BAKE=2 benches/fleet_convergence.sh   # staged rollouts only (issue 15)
#
# With ROLLOUT_BAKE=B, also three nodes with `[fleet.rollout]` (waves [ns1], [ns2, ns3], bake
# B s; every node's taster under the fault drill STEERDNS_TASTER_FAULT=abort:TASTER-BOOM):
# the same flips staged (command start -> every node answers: two bakes plus the gates), with
# `--emergency` (no bake), and the drill: a marked text put into etcd, timed from the put until
# the canary's /v1/status says the rollout halted (then `rollout abort` resets the fleet).
# Then the same for config/zone bundles: a zone change (new serial) deployed on every node
# (file replaced, SIGHUP) until the canary serves it, every node does and the generation
# completed; and a zone file carrying the drill's marker, from the deployment until
# `rollout status` says the bundle rollout halted (then the files are put back).
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
SIZES=${SIZES-"3 10"}
FLIPS=${FLIPS:-10}
ROLLOUT_BAKE=${ROLLOUT_BAKE:-}
command -v etcd >/dev/null || { echo "etcd is needed: apt-get install etcd-server" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/steerdns
fi
WORK=$(mktemp -d /tmp/steerdns-fleet-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

python3 - "$ROOT" "$BIN" "$WORK" "$SIZES" "$FLIPS" "$ROLLOUT_BAKE" <<'PY'
import base64, json, os, shutil, socket, statistics, struct, subprocess, sys, time, urllib.request

root, binary, work, sizes, flips = sys.argv[1], sys.argv[2], sys.argv[3], [int(s) for s in sys.argv[4].split()], int(sys.argv[5])
bake = int(sys.argv[6]) if sys.argv[6] else None
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

def start_node(d, name, fleet, extra="", env=None):
    os.makedirs(os.path.join(d, "geoip"))
    shutil.copytree(os.path.join(root, "zones"), os.path.join(d, "zones"))
    shutil.copy(os.path.join(root, "geoip/example.mmdb"), os.path.join(d, "geoip"))
    for f in ("control.toml", "steerdns.toml"):
        shutil.copy(os.path.join(root, f), d)
    with open(os.path.join(d, "admin.token"), "w") as f:  # the config names it; not in git
        f.write("bench-token\n")
    if fleet:
        with open(os.path.join(d, "steerdns.toml"), "a") as f:
            f.write(f'\n[fleet]\netcd = ["{fleet}"]\nprefix = "/bench"\nconverge_timeout_secs = 60\n{extra}')
    proc = subprocess.Popen([binary, "serve", "--config", os.path.join(d, "steerdns.toml"),
        "--node", name, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"] if fleet else
        [binary, "serve", "--config", os.path.join(d, "steerdns.toml"),
        "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env={**os.environ, "STEERDNS_LOG": "error", **(env or {})})
    procs.append(proc)
    dns = admin = None
    for line in proc.stdout:
        if line.startswith("listening on "): dns = line.split()[2]
        if line.startswith("admin on http://"): admin = line.strip()[len("admin on http://"):]
        if line.startswith("ready"): break
    host, port = dns.rsplit(":", 1)
    return (host, int(port)), admin, os.path.join(d, "steerdns.toml"), proc

def run(label, nodes, fleet, extra_args=()):
    config, admin0 = nodes[0][2], nodes[0][1]
    cmds, gaps, totals = [], [], []
    for i in range(flips):
        want = "alt" if i % 2 == 0 else "front"
        weights = ["frontdoor=0", "alt-cdn=100"] if want == "alt" else ["frontdoor=100", "alt-cdn=0"]
        t0 = time.perf_counter()
        out = subprocess.run([binary, "weight", "set", *extra_args, "critical", *weights, "--config", config]
            + ([] if fleet else ["--admin", admin0]), capture_output=True, text=True)
        t1 = time.perf_counter()
        if out.returncode != 0:
            sys.exit(f"{label}: weight set failed:\n{out.stdout}{out.stderr}")
        pending = [n[0] for n in nodes]
        while pending:
            pending = [a for a in pending if answer(a) != want]
            if time.perf_counter() - t1 > 60:
                sys.exit(f"{label}: {len(pending)} node(s) never answered {want}")
        t2 = time.perf_counter()
        cmds.append((t1 - t0) * 1000); gaps.append((t2 - t1) * 1000); totals.append((t2 - t0) * 1000)
    med = statistics.median
    print(f"{label:<22} command {med(cmds):7.1f} ms (max {max(cmds):7.1f})   return->all answer "
          f"{med(gaps):6.1f} ms (max {max(gaps):6.1f})   whole flip {med(totals):7.1f} ms (max {max(totals):7.1f})")
    return med(totals)

def wait_registered(config, n):
    deadline = time.time() + 30
    while True:
        out = subprocess.run([binary, "fleet", "status", "--json", "--config", config],
            capture_output=True, text=True)
        if out.returncode == 0 and len(json.loads(out.stdout)["nodes"]) == n:
            return
        if time.time() > deadline:
            sys.exit(f"{n} nodes did not all register:\n{out.stdout}{out.stderr}")
        time.sleep(0.1)

def rollout_view(admin):
    with urllib.request.urlopen(f"http://{admin}/v1/status", timeout=5) as r:
        return json.load(r)["fleet"]["rollout"] or {}

def etcdctl(endpoint, *args):
    out = subprocess.run(["etcdctl", "--endpoints", endpoint, *args], capture_output=True,
        text=True, env={**os.environ, "ETCDCTL_API": "3"})
    if out.returncode != 0:
        sys.exit(f"etcdctl {args}: {out.stderr}")
    return out.stdout

def wait_settled(nodes, what):
    deadline = time.time() + 60
    while not all(rollout_view(n[1]).get("phase") == "completed" for n in nodes):
        if time.time() > deadline:
            sys.exit(f"the fleet did not settle ({what})")
        time.sleep(0.05)

def drill(nodes, endpoint):
    halts = []
    for i in range(flips):
        current = json.loads(etcdctl(endpoint, "get", "/bench/control", "-w", "json"))["kvs"][0]
        text = base64.b64decode(current["value"]).decode()
        bad = f"{text}\n# TASTER-BOOM drill {i}\n"
        t0 = time.perf_counter()
        put = json.loads(etcdctl(endpoint, "put", "/bench/control", bad, "-w", "json"))
        revision = put["header"]["revision"]
        while True:
            view = rollout_view(nodes[0][1])
            if view.get("phase") == "halted" and view.get("candidate") == revision:
                break
            if time.perf_counter() - t0 > 30:
                sys.exit(f"drill {i}: no halt within 30 s: {view}")
            time.sleep(0.005)
        halts.append((time.perf_counter() - t0) * 1000)
        out = subprocess.run([binary, "rollout", "abort", "--config", nodes[0][2]],
            capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"rollout abort failed:\n{out.stdout}{out.stderr}")
        wait_settled(nodes, "after the abort")
    med = statistics.median
    print(f"{'drill: put -> halted':<34} {med(halts):7.1f} ms (max {max(halts):7.1f})")

ZONE_SERIAL = 2026113001

def zone_serial(admin):
    with urllib.request.urlopen(f"http://{admin}/v1/status", timeout=5) as r:
        zones = json.load(r)["zones"]
    return next(z["serial"] for z in zones if z["origin"].rstrip(".") == "example.com")

def deploy_zone(nodes, serial, marker=""):
    """What a config manager does: new zone file on every node, then SIGHUP."""
    for _, _, config, proc in nodes:
        path = os.path.join(os.path.dirname(config), "zones/example.com.zone")
        with open(os.path.join(root, "zones/example.com.zone")) as f:
            text = f.read().replace(str(ZONE_SERIAL), str(serial)) + marker
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)
        proc.send_signal(1)

def bundle_rollout(config):
    out = subprocess.run([binary, "rollout", "status", "--json", "--config", config],
        capture_output=True, text=True)
    return (json.loads(out.stdout).get("bundles") or {}).get("rollout") or {} if out.returncode == 0 else {}

def zone_rollouts(nodes):
    """A good zone change (new serial) deployed on every node: until the canary serves it, until
    every node does (one bake between the waves), until the generation completes (two)."""
    canary, everyone, completed = [], [], []
    for i in range(max(1, flips // 2)):
        serial = ZONE_SERIAL + 10 + i
        before = bundle_rollout(nodes[0][2]).get("candidate", 0)
        t0 = time.perf_counter()
        deploy_zone(nodes, serial)
        seen = None
        while not all(zone_serial(n[1]) == serial for n in nodes):
            if seen is None and zone_serial(nodes[0][1]) == serial:
                seen = time.perf_counter()
            if time.perf_counter() - t0 > 60:
                sys.exit(f"zone change {serial} did not reach every node")
            time.sleep(0.01)
        t_all = time.perf_counter()
        while True:
            r = bundle_rollout(nodes[0][2])
            if (r.get("phase") or {}).get("phase") == "completed" and r.get("candidate", 0) > before:
                break
            if time.perf_counter() - t0 > 60:
                sys.exit(f"zone change {serial}: the bundle rollout did not complete: {r}")
            time.sleep(0.02)
        canary.append(((seen or t_all) - t0) * 1000); everyone.append((t_all - t0) * 1000)
        completed.append((time.perf_counter() - t0) * 1000)
    med = statistics.median
    print(f"{'zone change: deploy -> canary':<34} {med(canary):7.1f} ms (max {max(canary):7.1f})")
    print(f"{'   ... -> every node serves it':<34} {med(everyone):7.1f} ms (max {max(everyone):7.1f})")
    print(f"{'   ... -> generation completed':<34} {med(completed):7.1f} ms (max {max(completed):7.1f})")
    return ZONE_SERIAL + 10 + max(1, flips // 2) - 1

def zone_drill(nodes, good):
    """A zone change the tasters crash on (its marker is in the zone file): from the deployment
    to the bundle rollout halted; then the files are put back, and no node ever served it."""
    halts = []
    for i in range(max(1, flips // 2)):
        serial = good + 100 + i
        before = bundle_rollout(nodes[0][2]).get("candidate", 0)
        t0 = time.perf_counter()
        deploy_zone(nodes, serial, "; TASTER-BOOM\n")
        while True:
            r = bundle_rollout(nodes[0][2])
            if (r.get("phase") or {}).get("phase") == "halted" and r.get("candidate", 0) > before:
                break
            if any(zone_serial(n[1]) == serial for n in nodes):
                sys.exit(f"zone drill {i}: a node serves the marked zone")
            if time.perf_counter() - t0 > 30:
                sys.exit(f"zone drill {i}: no halt within 30 s")
            time.sleep(0.005)
        halts.append((time.perf_counter() - t0) * 1000)
        deploy_zone(nodes, good)
        deadline = time.time() + 30
        while any(bundle_pending(n[1]) for n in nodes):
            if time.time() > deadline:
                sys.exit("the reverted files are still pending")
            time.sleep(0.02)
    med = statistics.median
    print(f"{'zone drill: deploy -> halted':<34} {med(halts):7.1f} ms (max {max(halts):7.1f})")

def bundle_pending(admin):
    with urllib.request.urlopen(f"http://{admin}/v1/status", timeout=5) as r:
        bundle = json.load(r).get("bundle") or {}
    return bundle.get("pending") is not None

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
        deadline = time.time() + 30
        while True:
            out = subprocess.run([binary, "fleet", "status", "--json", "--config", nodes[0][2]],
                capture_output=True, text=True)
            if out.returncode == 0 and len(json.loads(out.stdout)["nodes"]) == n:
                break
            if time.time() > deadline:
                sys.exit(f"{n} nodes did not all register:\n{out.stdout}{out.stderr}")
            time.sleep(0.1)
        total = run(f"{n} nodes, etcd", nodes, endpoint)
        print(f"{'':<22} whole flip = {total / baseline:.2f}x the single node's")
        stop_all()
    if bake is not None:
        d = os.path.join(work, "staged")
        os.makedirs(d)
        endpoint = start_etcd(d)
        plan = f'[fleet.rollout]\nwaves = [["ns1"], ["ns2", "ns3"]]\nbake_secs = {bake}\n'
        drill_env = {"STEERDNS_TASTER_FAULT": "abort:TASTER-BOOM"}
        nodes = [start_node(os.path.join(d, f"ns{i}"), f"ns{i}", endpoint, plan, drill_env)
            for i in range(1, 4)]
        wait_registered(nodes[0][2], 3)
        wait_settled(nodes, "seeded")
        staged = run(f"3 nodes, staged, bake {bake} s", nodes, endpoint)
        print(f"{'':<22} whole flip = {staged / baseline:.2f}x the single node's; "
              f"{staged - 2000 * bake:.1f} ms beyond the two bakes")
        emergency = run("3 nodes, --emergency", nodes, endpoint, ["--emergency"])
        print(f"{'':<22} whole flip = {emergency / baseline:.2f}x the single node's")
        drill(nodes, endpoint)
        good = zone_rollouts(nodes)
        zone_drill(nodes, good)
        stop_all()
finally:
    stop_all()
PY
