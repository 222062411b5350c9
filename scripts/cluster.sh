#!/usr/bin/env bash
# A local Magnetar cluster on loopback: a real ZooKeeper, three bookies and
# two brokers, each a process with its own data dir, ports and log.
#
#   scripts/cluster.sh up       # build bin/magnetar, start everything, wait until it serves
#   scripts/cluster.sh down     # stop everything (SIGTERM) and remove the cluster's files
#   scripts/cluster.sh status   # what runs, and where
#
# Environment:
#   MAGNETAR_CLUSTER_DIR  state: data dirs, logs, pid files (default /tmp/magnetar-cluster)
#   MAGNETAR_CLUSTER_ZK_PORT  ZooKeeper's client port (default 22181)
#
# Ports: bookies 127.0.0.1:23181-23183; broker-1 Pulsar 127.0.0.1:6650,
# Kafka 127.0.0.1:9092, HTTP 127.0.0.1:8080; broker-2 Pulsar 127.0.0.1:6651,
# Kafka 127.0.0.1:9093, HTTP 127.0.0.1:8081. Ledgers are 3/2/2. Clients list
# both brokers (pulsar://127.0.0.1:6650,127.0.0.1:6651; Kafka bootstrap
# 127.0.0.1:9092,127.0.0.1:9093) and reach every topic through lookups.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${MAGNETAR_CLUSTER_DIR:-/tmp/magnetar-cluster}
ZK_PORT=${MAGNETAR_CLUSTER_ZK_PORT:-22181}
STORE="zk:127.0.0.1:$ZK_PORT/magnetar"
BIN=./bin/magnetar
log() { echo "cluster.sh: $*" >&2; }

zk() { MAGNETAR_ZK_DIR="$DIR/zk" MAGNETAR_ZK_PORT=$ZK_PORT scripts/zookeeper.sh "$@"; }

alive() { [[ -f $DIR/$1.pid ]] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

# start NAME READY-TEXT ARGS...: runs bin/magnetar ARGS in the background,
# logging to $DIR/NAME.log, and waits for READY-TEXT in the log.
start() {
	local name=$1 ready=$2
	shift 2
	if alive "$name"; then
		log "$name already runs (pid $(cat "$DIR/$name.pid"))"
		return
	fi
	nohup "$BIN" "$@" >"$DIR/$name.log" 2>&1 &
	echo $! >"$DIR/$name.pid"
	for _ in $(seq 1 300); do
		grep -q "$ready" "$DIR/$name.log" 2>/dev/null && { log "$name up (log $DIR/$name.log)"; return; }
		alive "$name" || { log "$name exited; its log:"; tail -n 30 "$DIR/$name.log" >&2; exit 1; }
		sleep 0.2
	done
	log "$name not ready in 60s; its log: $DIR/$name.log"
	exit 1
}

stop() {
	local name=$1
	alive "$name" || { rm -f "$DIR/$name.pid"; return; }
	local pid
	pid=$(cat "$DIR/$name.pid")
	kill -TERM "$pid"
	for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if kill -0 "$pid" 2>/dev/null; then
		log "$name did not stop on SIGTERM; killing it"
		kill -KILL "$pid" || true
	fi
	rm -f "$DIR/$name.pid"
	log "$name stopped"
}

case "${1:-}" in
up)
	make --no-print-directory build >&2
	mkdir -p "$DIR"
	zk status >/dev/null 2>&1 || zk start >&2
	for i in 1 2 3; do
		start "bookie-$i" "magnetar bookie ready" bookie --metadata-store "$STORE" --data-dir "$DIR/bookie-$i" \
			--bookie-listen "127.0.0.1:2318$i"
	done
	for i in 1 2; do
		start "broker-$i" "magnetar broker ready" broker --metadata-store "$STORE" --cluster local \
			--pulsar-listen "127.0.0.1:665$((i - 1))" --kafka-listen "127.0.0.1:909$((i + 1))" \
			--http-listen "127.0.0.1:808$((i - 1))" --zk-session-timeout 10s \
			--managed-ledger-ensemble-size 3 --managed-ledger-write-quorum 2 --managed-ledger-ack-quorum 2
	done
	log "up: Pulsar pulsar://127.0.0.1:6650,127.0.0.1:6651, Kafka 127.0.0.1:9092,127.0.0.1:9093," \
		"HTTP http://127.0.0.1:8080 and :8081 (metadata $STORE)"
	;;
down)
	for i in 2 1; do stop "broker-$i"; done
	for i in 3 2 1; do stop "bookie-$i"; done
	zk stop >&2 || true
	rm -rf "$DIR"
	log "down"
	;;
status)
	rc=0
	for name in bookie-1 bookie-2 bookie-3 broker-1 broker-2; do
		if alive "$name"; then echo "$name: running (pid $(cat "$DIR/$name.pid"), log $DIR/$name.log)"; else echo "$name: not running"; rc=1; fi
	done
	if zk status >/dev/null 2>&1; then echo "zookeeper: running on 127.0.0.1:$ZK_PORT"; else echo "zookeeper: not running"; rc=1; fi
	for port in 8080 8081; do
		if curl -fs "http://127.0.0.1:$port/status" >/dev/null 2>&1; then echo "broker :$port: serving (http://127.0.0.1:$port/status)"; else echo "broker :$port: not serving"; rc=1; fi
	done
	exit $rc
	;;
*)
	echo "usage: $0 up|down|status" >&2
	exit 2
	;;
esac
