#!/usr/bin/env bash
# deploy/fleet/demo.sh: a local fleet in one command: etcd and three steerdns nodes on
# loopback sharing one control state (see "A local fleet" in deploy/README.md).
#
#   deploy/fleet/demo.sh                 # builds steerdns --release if BIN is not given
#   NODES=5 deploy/fleet/demo.sh         # more nodes
#
# Node i serves DNS on 127.0.0.1:$((DNS_BASE + i)) and its admin endpoint on
# 127.0.0.1:$((ADMIN_BASE + i)); etcd listens on 127.0.0.1:$ETCD_PORT. Each node has its own
# copy of the bundled example under a temporary directory (its control file is its cache of
# the fleet's control state). Ctrl-C stops everything and removes the directory.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
NODES=${NODES:-3}
ETCD_PORT=${ETCD_PORT:-2479}
DNS_BASE=${DNS_BASE:-5300}
ADMIN_BASE=${ADMIN_BASE:-5390}
PREFIX=${PREFIX:-/steerdns/demo}
command -v etcd >/dev/null || { echo "etcd is needed: apt-get install etcd-server" >&2; exit 1; }
if [ -z "${BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet)
    BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/steerdns
fi
WORK=$(mktemp -d /tmp/steerdns-fleet-demo.XXXXXX)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

ENDPOINT="http://127.0.0.1:$ETCD_PORT"
PEER="http://127.0.0.1:$((ETCD_PORT + 1))"
etcd --name demo --data-dir "$WORK/etcd" \
    --listen-client-urls "$ENDPOINT" --advertise-client-urls "$ENDPOINT" \
    --listen-peer-urls "$PEER" --initial-advertise-peer-urls "$PEER" \
    --initial-cluster "demo=$PEER" --logger zap --log-outputs stderr --log-level warn \
    2>"$WORK/etcd.log" &
PIDS+=($!)
for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$ETCD_PORT") 2>/dev/null; then break; fi
    sleep 0.1
done

for i in $(seq "$NODES"); do
    dir="$WORK/ns$i"
    mkdir -p "$dir/geoip"
    cp -r "$ROOT/zones" "$dir/zones"
    cp "$ROOT/geoip/example.mmdb" "$dir/geoip/"
    # No admin token ships: each node creates its own admin.token (random, 0600) at start.
    cp "$ROOT/control.toml" "$ROOT/steerdns.toml" "$dir/"
    cat >>"$dir/steerdns.toml" <<CONF

[fleet]
etcd = ["$ENDPOINT"]
prefix = "$PREFIX"
CONF
    "$BIN" serve --config "$dir/steerdns.toml" --node "ns$i" --nsid "ns$i" \
        --listen "127.0.0.1:$((DNS_BASE + i))" --admin-listen "127.0.0.1:$((ADMIN_BASE + i))" \
        >"$dir/stdout.log" 2>"$dir/stderr.log" &
    PIDS+=($!)
done
for i in $(seq "$NODES"); do
    for _ in $(seq 100); do
        grep -q '^ready' "$WORK/ns$i/stdout.log" 2>/dev/null && break
        sleep 0.1
    done
    grep -q '^ready' "$WORK/ns$i/stdout.log" || {
        echo "ns$i did not start:" >&2; cat "$WORK/ns$i/stderr.log" >&2; exit 1; }
done

CONFIG="$WORK/ns1/steerdns.toml"
# Nodes register in etcd just after they are ready; the commands below need them registered.
registered=false
for _ in $(seq 100); do
    if "$BIN" fleet status --config "$CONFIG" 2>/dev/null | grep -q "^$NODES live node"; then
        registered=true; break
    fi
    sleep 0.1
done
$registered || echo "warning: not all $NODES nodes registered in etcd yet:" \
    "$("$BIN" fleet status --config "$CONFIG" 2>&1 | head -2)" >&2
cat <<EOT
A fleet of $NODES nodes on etcd $ENDPOINT under $PREFIX (logs and caches in $WORK).

  Every node, its serial and revision:
    $BIN fleet status --config $CONFIG
  Break glass through any node's config; the command waits until every node serves it:
    $BIN weight set critical frontdoor=0 alt-cdn=100 --config $CONFIG
  Ask each node (the answer, and which serial it serves):
    for p in $(seq -s ' ' $((DNS_BASE + 1)) $((DNS_BASE + NODES))); do dig @127.0.0.1 -p \$p +short critical.example.com; dig @127.0.0.1 -p \$p +short CH TXT serial.steerdns; done
  Roll back (the fleet's history lives in etcd):
    $BIN control history --config $CONFIG
    $BIN control rollback --config $CONFIG

Ctrl-C stops etcd and the nodes.
EOT
wait
