#!/usr/bin/env bash
# benches/tenants_scale.sh: issue 30's platform-scale figures for tenants, on the bundled
# example (its platform wildcard *.edge.example.net) in a copy under /tmp:
#
#   BIN=target/release/steerdns TENANTS=1000000 ROUNDS=1 benches/tenants_scale.sh
#
# Cases, each started from exec with the same binary, measured the same way:
#   empty     the example, no tenant documents
#   zone      the example plus a plain zone big.example with the same TENANTS names (one A each)
#   tenants   the example plus TENANTS documents tenants/tNNNNNNN.toml, one name each
#             (tNNNNNNN.edge.example.net, the platform's policy), read from the folder
#   cached    the same again, restarted: served from the last-known-good cache the first run
#             wrote (tenants/.lkg/tenants.bin), the folder looked at in the background
# For each: ms from exec to the first answer for the last name (benches/first_answer.py: a UDP
# query every 2 ms, its clock starts at the exec), ms until /v1/status reports every tenant
# applied (tenants case), and PSS summed over the server's processes (taster child included)
# 1 s after that. Memory per tenant = (PSS tenants - PSS empty) / TENANTS.
# Then, with the tenants loaded: one tenant's document changed through PUT /v1/tenants (the API
# returns once it is served), ms per change, median of CHANGES, at TENANTS and at 1,000.
# Only 127.0.0.1; every server is stopped by its session id.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/benches/lib.sh"
TENANTS=${TENANTS:-100000}
ROUNDS=${ROUNDS:-1}
CHANGES=${CHANGES:-50}
PORT=${PORT:-15540}
ADMIN_PORT=${ADMIN_PORT:-15541}
bench_start tenants
need python3 setsid curl

# A copy of the bundled example in $1 with no tenants, on the bench's ports.
example() {
    local d=$1
    mkdir -p "$d/tenants"
    cp -r "$ROOT/zones" "$ROOT/geoip" "$ROOT/control.toml" "$d/"
    cp "$ROOT/steerdns.toml" "$d/"
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$d/admin.token"
    chmod 600 "$d/admin.token"
}
# N tenant documents t0000000.. in $1/tenants, at TTL $3 (default 120).
tenant_files() {
    python3 - "$1/tenants" "$2" "${3:-120}" << 'EOF'
import os, sys
d, n, ttl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    with open(os.path.join(d, f"t{i:07d}.toml"), "w") as f:
        f.write(f'names = ["t{i:07d}.edge.example.net."]\nttl = {ttl}\n')
EOF
}

example "$WORK/empty"
example "$WORK/zone"
awk -v n="$TENANTS" 'BEGIN {
    print "$ORIGIN big.example."; print "$TTL 300"
    print "@ IN SOA ns1.big.example. hostmaster.big.example. 1 3600 600 604800 300"
    print "@ IN NS ns1"; print "ns1 IN A 192.0.2.53"
    for (i = 0; i < n; i++)
        printf "t%07d IN A 10.%d.%d.%d\n", i, int(i / 65536) % 256, int(i / 256) % 256, i % 256
}' > "$WORK/zone/zones/big.example.zone"
example "$WORK/tenants"
tenant_files "$WORK/tenants" "$TENANTS"
example "$WORK/small"
tenant_files "$WORK/small" 1000
LAST=$(printf 't%07d' $((TENANTS - 1)))
log "$TENANTS tenants: $(du -sh "$WORK/tenants/tenants" | cut -f1) of documents"

serve() { # dir
    echo "$BIN" serve --config "$1/steerdns.toml" --listen "127.0.0.1:$PORT" --admin-listen "127.0.0.1:$ADMIN_PORT"
}
status_field() { # python expression over the status JSON `s`
    curl -s "http://127.0.0.1:$ADMIN_PORT/v1/status" | python3 -c "import json,sys; s=json.load(sys.stdin); print($1)" 2> /dev/null
}
pss_mib() {
    local kib=0 p
    for p in $(session_pids "$SESSION"); do
        kib=$((kib + $(awk '/^Pss:/ { print $2 }' "/proc/$p/smaps_rollup" 2> /dev/null || echo 0)))
    done
    echo $((kib / 1024))
}
# ms from now until every one of $1 tenants is served (status tenants.served)
wait_served() {
    local want=$1 t0 n
    t0=$(date +%s%N)
    for _ in $(seq 1 36000); do
        n=$(status_field 's["tenants"]["served"]')
        [ "${n:-0}" -ge "$want" ] && { echo $((($(date +%s%N) - t0) / 1000000)); return 0; }
        sleep 0.05
    done
    return 1
}
# Changes tenant t0000000's TTL CHANGES times through the API; median ms per PUT (served on return).
changes() { # dir
    python3 - "$ADMIN_PORT" "$(cat "$1/admin.token")" "$CHANGES" << 'EOF'
import http.client, statistics, sys, time
port, token, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ms = []
for i in range(n):
    body = f'names = ["t0000000.edge.example.net."]\nttl = {200 + i % 50}\n'
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.monotonic()
    c.request("PUT", "/v1/tenants/t0000000", body, {"Authorization": f"Bearer {token}", "Content-Type": "application/toml"})
    r = c.getresponse(); r.read()
    ms.append((time.monotonic() - t0) * 1000)
    if r.status not in (200, 201):
        sys.exit(f"PUT {i}: HTTP {r.status}")
print(f"{statistics.median(ms):.1f}")
EOF
}

declare -A FIRST ALL PSS CHANGE
measure() { # label dir name-to-ask tenants-to-wait-for [keep-cache]
    local label=$1 dir=$2 name=$3 want=$4 keep=${5:-} r ms all pss
    for r in $(seq 1 "$ROUNDS"); do
        rm -rf "$dir/steerdns.toml.state" "$dir/tenants/.history"
        [ -n "$keep" ] || rm -rf "$dir/tenants/.lkg"
        # shellcheck disable=SC2046
        # A million documents read from the folder take minutes (a history entry each).
        ms=$(FIRST_ANSWER_LIMIT=900 python3 "$ROOT/benches/first_answer.py" "$PORT" "$name" "$WORK/pid" "$OUT/serve.$label.$r.log" $(serve "$dir"))
        local rc=$?
        SESSION=$(cat "$WORK/pid" 2> /dev/null)
        [ $rc = 0 ] || { cat "$OUT/serve.$label.$r.log" >&2; die "$label: no answer"; }
        all=$(wait_served "$want") || die "$label: tenants not all served"
        sleep 1
        pss=$(pss_mib)
        if [ "$want" -gt 0 ]; then
            CHANGE[$label]=$(changes "$dir") || die "$label: changes failed"
            for _ in $(seq 1 1200); do # the cache, for the cached case
                [ "$(status_field 's["tenants"]["cache_writes"]')" -ge 1 ] 2> /dev/null && break
                sleep 0.1
            done
        fi
        stop_server
        log "$label round $r: first answer $ms ms, every tenant served after $all ms more, PSS $pss MiB, change ${CHANGE[$label]:-–} ms"
        FIRST[$label]=$ms ALL[$label]=$all PSS[$label]=$pss
    done
}

measure empty "$WORK/empty" fabrikam.edge.example.net 0
if [ "${SKIP_ZONE:-}" = 1 ]; then FIRST[zone]="(skipped)" PSS[zone]="–"; else
measure zone "$WORK/zone" "$LAST.big.example" 0; fi
measure tenants "$WORK/tenants" "$LAST.edge.example.net" "$TENANTS"
measure cached "$WORK/tenants" "$LAST.edge.example.net" "$TENANTS" keep
measure small "$WORK/small" t0000999.edge.example.net 1000

R=$OUT/tenants_scale.md
{
    echo "| case | first answer after exec (last name) | every tenant served | PSS once serving | one tenant change (PUT → served) |"
    echo "| --- | ---: | ---: | ---: | ---: |"
    printf '| empty example | %s ms | – | %s MiB | – |\n' "${FIRST[empty]}" "${PSS[empty]}"
    printf '| %d names as a plain zone | %s ms | – | %s MiB | – |\n' "$TENANTS" "${FIRST[zone]}" "${PSS[zone]}"
    printf '| %d tenants | %s ms | +%s ms | %s MiB | %s ms |\n' "$TENANTS" "${FIRST[tenants]}" "${ALL[tenants]}" "${PSS[tenants]}" "${CHANGE[tenants]}"
    printf '| %d tenants, restarted from the cache | %s ms | +%s ms | %s MiB | %s ms |\n' "$TENANTS" "${FIRST[cached]}" "${ALL[cached]}" "${PSS[cached]}" "${CHANGE[cached]}"
    printf '| 1000 tenants | %s ms | +%s ms | %s MiB | %s ms |\n' "${FIRST[small]}" "${ALL[small]}" "${PSS[small]}" "${CHANGE[small]}"
    echo
    echo "memory per tenant above the empty server: $(python3 -c "print(round((${PSS[tenants]} - ${PSS[empty]}) * 1048576 / $TENANTS))") bytes read from the folder," \
        "$(python3 -c "print(round((${PSS[cached]} - ${PSS[empty]}) * 1048576 / $TENANTS))") bytes from the cache;" \
        "one change at $TENANTS vs 1000 tenants: $(python3 -c "print(round(${CHANGE[tenants]} / ${CHANGE[small]}, 2))")x"
    echo "$(date -u +%Y-%m-%dT%H:%MZ), load average $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$R"
log "table in $R"
