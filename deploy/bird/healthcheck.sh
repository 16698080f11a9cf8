#!/usr/bin/env bash
# Keeps this node's anycast announcement only while steerdns answers.
#
#   healthcheck.sh check   one probe; exit 0 if every zone answers, 1 if not (no route change)
#   healthcheck.sh run     probe every INTERVAL seconds; after FALL failed probes in a row run
#                          WITHDRAW_CMD, after RISE good probes in a row run ANNOUNCE_CMD.
#                          ROUNDS > 0 stops after that many probes (0 = until killed).
#
# A probe asks for the SOA of each zone in ZONES over UDP with one try and a one-second timeout,
# and counts as good only if every answer is NOERROR, authoritative (aa) and carries the SOA.
# A node that answers wrongly (REFUSED, SERVFAIL, lame) is withdrawn like a silent one.
#
# Settings (environment):
#   SERVER=127.0.0.1  PORT=53      where steerdns listens (ask the anycast address itself to
#                                  also catch a missing address on dummy0)
#   ZONES="example.com"            zones to probe, space separated
#   INTERVAL=1  RISE=3  FALL=2     seconds between probes; hysteresis
#   ROUNDS=0                       probes before exiting (0 = forever)
#   MAINTENANCE_FILE=/run/steerdns/maintenance
#                                  while this file exists the node counts as down whatever
#                                  steerdns answers: `touch` it to drain the node (the route is
#                                  withdrawn after FALL probes), remove it to return; set it
#                                  empty to disable
#   WITHDRAW_CMD / ANNOUNCE_CMD    shell commands; default: disable / enable the anycast_dns*
#                                  static protocols of deploy/bird/bird.conf through birdc
#   DIG=dig
#
# Run it as a service next to BIRD (e.g. a systemd unit with Restart=always); it starts in an
# unknown state and announces only after RISE good probes, so a node that boots with a broken
# steerdns never attracts traffic.

set -u -o pipefail

SERVER=${SERVER:-127.0.0.1}
PORT=${PORT:-53}
ZONES=${ZONES:-example.com}
INTERVAL=${INTERVAL:-1}
RISE=${RISE:-3}
FALL=${FALL:-2}
ROUNDS=${ROUNDS:-0}
MAINTENANCE_FILE=${MAINTENANCE_FILE-/run/steerdns/maintenance}
DIG=${DIG:-dig}
WITHDRAW_CMD=${WITHDRAW_CMD:-birdc 'disable "anycast_dns*"'}
ANNOUNCE_CMD=${ANNOUNCE_CMD:-birdc 'enable "anycast_dns*"'}

log() {
	echo "healthcheck: $*" >&2
}

# One zone: NOERROR, aa, and an SOA record for the zone in the answer section.
probe_zone() {
	local zone=$1 out name
	name=${zone%.}
	name=${name//./\\.}
	out=$("$DIG" "@$SERVER" -p "$PORT" +time=1 +tries=1 +norec "$zone" SOA 2>&1) || return 1
	grep -q 'status: NOERROR' <<<"$out" || return 1
	grep -Eq '^;; flags:[^;]* aa[ ;]' <<<"$out" || return 1
	grep -Eq "^${name}\.[[:space:]]+[0-9]+[[:space:]]+IN[[:space:]]+SOA[[:space:]]" <<<"$out" || return 1
}

probe() {
	local zone
	if [[ -n $MAINTENANCE_FILE && -e $MAINTENANCE_FILE ]]; then
		return 1
	fi
	for zone in $ZONES; do
		probe_zone "$zone" || return 1
	done
}

run() {
	local state=unknown good=0 bad=0 round=0
	while ((ROUNDS == 0 || round < ROUNDS)); do
		round=$((round + 1))
		if probe; then
			good=$((good + 1)) bad=0
		else
			bad=$((bad + 1)) good=0
		fi
		if [[ $state != up ]] && ((good >= RISE)); then
			log "steerdns answers on $SERVER port $PORT: announcing"
			if bash -c "$ANNOUNCE_CMD"; then state=up; else log "announce command failed"; fi
		elif [[ $state != down ]] && ((bad >= FALL)); then
			log "steerdns does not answer on $SERVER port $PORT (or $MAINTENANCE_FILE exists): withdrawing"
			if bash -c "$WITHDRAW_CMD"; then state=down; else log "withdraw command failed"; fi
		fi
		sleep "$INTERVAL"
	done
}

case "${1:-}" in
check) probe ;;
run) run ;;
*)
	echo "usage: $0 check|run (settings in the environment; see the top of this file)" >&2
	exit 2
	;;
esac
