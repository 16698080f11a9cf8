#!/usr/bin/env bash
# benches/taster.sh: what the taster (a child process loading each change first) costs per
# change, measured against the same server with `[taster] enabled = false` in the same run.
#
#   benches/taster.sh                    # builds steerdns --release if BIN is not given
#   NAMES=100000 FLIPS=10 benches/taster.sh
#
# For the bundled example (zones/, geoip/, control.toml) and for the example plus a generated
# zone of NAMES names: starts the server (taster on, then off), flips the control file's
# weights FLIPS times, and reads from /v1/status after each flip the reload time the server
# measured (last_reload_ms: taste + load + swap) and the taste alone (taster.last_ms).
# Also times a cold start (exec to "ready") both ways. Prints medians and the ratio on/off.
# Only 127.0.0.1, ports chosen by the kernel; every process started here is stopped.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAMES=${NAMES:-100000}
FLIPS=${FLIPS:-10}
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/steerdns
fi
BIN=$(realpath "$BIN")
WORK=$(mktemp -d /tmp/steerdns-taster-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

python3 - "$ROOT" "$BIN" "$WORK" "$NAMES" "$FLIPS" <<'EOF'
import json, os, shutil, statistics, subprocess, sys, time, urllib.request

root, binary, work, names, flips = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])

def control(frontdoor, alt):
    return ("[profiles.critical.endpoints]\n"
            f"frontdoor = {{ weight = {frontdoor} }}\nalt-cdn = {{ weight = {alt} }}\n"
            "appgw = { weight = 0 }\n")

def make_case(name, big):
    d = os.path.join(work, name)
    shutil.copytree(os.path.join(root, "zones"), os.path.join(d, "zones"))
    os.makedirs(os.path.join(d, "geoip"))
    shutil.copy(os.path.join(root, "geoip/example.mmdb"), os.path.join(d, "geoip"))
    shutil.copy(os.path.join(root, "control.toml"), d)
    with open(os.path.join(root, "steerdns.toml")) as f:
        config = f.read()
    with open(os.path.join(d, "admin.token"), "w") as f:
        f.write("bench-token\n")
    if big:
        with open(os.path.join(d, "zones/big.example.zone"), "w") as f:
            f.write("$ORIGIN big.example.\n$TTL 300\n"
                    "@ IN SOA ns1.big.example. hostmaster.big.example. 1 3600 600 604800 300\n"
                    "@ IN NS ns1\nns1 IN A 192.0.2.53\n")
            for i in range(big):
                f.write(f"h{i} IN A 10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}\n")
    return d, config

def status(admin):
    with urllib.request.urlopen(f"http://{admin}/v1/status", timeout=10) as r:
        return json.load(r)

def run(d, config, enabled):
    with open(os.path.join(d, "steerdns.toml"), "w") as f:
        f.write(config + f"\n[taster]\nenabled = {'true' if enabled else 'false'}\n")
    with open(os.path.join(d, "control.toml"), "w") as f:
        f.write(control(100, 0))
    started = time.monotonic()
    p = subprocess.Popen([binary, "serve", "--config", os.path.join(d, "steerdns.toml"),
                          "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"],
                         cwd=d, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=dict(os.environ, STEERDNS_LOG="error"))
    admin = None
    try:
        for line in p.stdout:
            if line.startswith("admin on http://"):
                admin = line.strip().removeprefix("admin on http://")
            if line.startswith("ready"):
                break
        cold = time.monotonic() - started
        reload_ms, taste_ms = [], []
        for i in range(flips):
            before = status(admin)["serial"]
            path = os.path.join(d, "control.toml")
            with open(path + ".tmp", "w") as f:
                f.write(control(0, 100) if i % 2 == 0 else control(100, 0))
            os.rename(path + ".tmp", path)
            deadline = time.monotonic() + 60
            while True:
                s = status(admin)
                if s["serial"] != before:
                    break
                if s["reloads_refused"]:
                    sys.exit(f"refused: {s['last_refusal']}")
                if time.monotonic() > deadline:
                    sys.exit("no reload within 60 s")
                time.sleep(0.005)
            reload_ms.append(s["last_reload_ms"])
            taste_ms.append(s["taster"]["last_ms"])
        return cold, statistics.median(reload_ms), statistics.median(taste_ms)
    finally:
        p.kill()
        p.wait()

print(f"taster cost per change ({flips} control flips each, medians; same run)")
print(f"{'case':<28} {'taster':<6} {'cold start':>11} {'reload':>10} {'taste':>10}")
for name, big in [("example", 0), (f"example + {names} names", names)]:
    d, config = make_case(name.replace(" ", "_").replace("+", ""), big)
    rows = {}
    for enabled in (True, False):
        cold, reload, taste = run(d, config, enabled)
        rows[enabled] = (cold, reload)
        shown = f"{taste:8.1f}ms" if enabled else f"{'-':>10}"
        print(f"{name:<28} {'on' if enabled else 'off':<6} {cold * 1000:9.0f}ms "
              f"{reload:8.1f}ms {shown}")
    (c_on, r_on), (c_off, r_off) = rows[True], rows[False]
    print(f"{name:<28} ratio  {c_on / c_off:10.2f}x {r_on / r_off:9.2f}x")
EOF
