#!/usr/bin/env bash
# Starts, stops and reports on a throwaway ZooKeeper for tests (meta/zk).
#
#   scripts/zookeeper.sh start    # (re)start with a fresh data dir, wait until it answers
#   scripts/zookeeper.sh stop     # stop it and wait until the port is free
#   scripts/zookeeper.sh status   # exit 0 if it answers ruok
#
# Environment:
#   MAGNETAR_ZK_DIR   state dir: zoo.cfg, data/, zookeeper.log, zookeeper.pid
#                     (default /tmp/magnetar-test-zk)
#   MAGNETAR_ZK_PORT  client port (default 21810)
#
# Tests find the server through MAGNETAR_TEST_ZK=127.0.0.1:$MAGNETAR_ZK_PORT.
#
# Uses Debian's zookeeper package (apt-get install zookeeper). tickTime is
# 500 ms so the shortest session timeout the server grants is 1 s and
# session-expiry tests are quick.
set -euo pipefail

ZK_HOME=/usr/share/zookeeper
ZK_SERVER="$ZK_HOME/bin/zkServer.sh"
DIR="${MAGNETAR_ZK_DIR:-/tmp/magnetar-test-zk}"
PORT="${MAGNETAR_ZK_PORT:-21810}"
PIDFILE="$DIR/zookeeper.pid"
LOG="$DIR/zookeeper.log"
CFG="$DIR/zoo.cfg"
START_TIMEOUT=60 # seconds
STOP_TIMEOUT=30  # seconds

[[ -n "$DIR" && "$DIR" != / ]] || { echo "zookeeper.sh: MAGNETAR_ZK_DIR must name a directory other than /" >&2; exit 1; }

die() {
	echo "zookeeper.sh: $*" >&2
	exit 1
}

# four_letter CMD prints the server's answer to a four-letter-word command,
# or nothing if it does not answer within 2 s.
four_letter() {
	local cmd=$1
	timeout 2 bash -c '
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf "%s" "$2" >&3
		cat <&3
	' _ "$PORT" "$cmd" 2>/dev/null || true
}

port_in_use() {
	timeout 1 bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1"' _ "$PORT" 2>/dev/null
}

# running prints the pid from our pidfile if that process is alive and is
# the server we started (not a process that got its pid since).
running() {
	[[ -f "$PIDFILE" ]] || return 1
	local pid
	pid=$(<"$PIDFILE")
	[[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
	if [[ -r "/proc/$pid/cmdline" ]] && ! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CFG"; then
		return 1
	fi
	echo "$pid"
}

stop() {
	local pid
	if pid=$(running); then
		kill "$pid" 2>/dev/null || true
		local i
		for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			echo "zookeeper.sh: pid $pid ignored SIGTERM for ${STOP_TIMEOUT}s, killing it" >&2
			kill -9 "$pid" 2>/dev/null || true
		fi
		echo "zookeeper.sh: stopped ZooKeeper (pid $pid) on port $PORT"
	else
		echo "zookeeper.sh: no ZooKeeper running from $PIDFILE"
	fi
	rm -f "$PIDFILE"
	local i
	for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
		port_in_use || return 0
		sleep 0.1
	done
	die "port $PORT is still in use ${STOP_TIMEOUT}s after stopping; is another process listening on it?"
}

start() {
	[[ -x "$ZK_SERVER" ]] ||
		die "$ZK_SERVER not found; install Debian's zookeeper package: apt-get install zookeeper"
	command -v java >/dev/null || die "java not found; install a JRE (apt-get install default-jre-headless)"

	if running >/dev/null; then
		stop
	fi
	if port_in_use; then
		die "port $PORT is in use by a process not started from $PIDFILE; stop it or set MAGNETAR_ZK_PORT"
	fi

	rm -rf "$DIR/data"
	mkdir -p "$DIR/data"
	cat >"$CFG" <<-EOF
		# Written by scripts/zookeeper.sh; rewritten on every start.
		tickTime=500
		minSessionTimeout=1000
		maxSessionTimeout=60000
		dataDir=$DIR/data
		clientPort=$PORT
		clientPortAddress=127.0.0.1
		maxClientCnxns=0
		admin.enableServer=false
		4lw.commands.whitelist=ruok,srvr,stat
		autopurge.purgeInterval=0
	EOF

	# Debian's classpath has no SLF4J binding, so the server would log
	# nothing; slf4j-simple (if installed) logs to stderr, which goes to
	# $LOG. java takes the last -cp, so this one replaces zkEnv.sh's.
	local jvmflags="-Xmx512m"
	if [[ -f /usr/share/java/slf4j-simple.jar ]]; then
		jvmflags+=" -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar"
		jvmflags+=" -Dorg.slf4j.simpleLogger.showDateTime=true"
	fi
	# start-foreground execs java, so $! is the server's pid.
	JMXDISABLE=true JVMFLAGS="$jvmflags" \
		nohup "$ZK_SERVER" start-foreground "$CFG" >"$LOG" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$PIDFILE"

	local i
	for ((i = 0; i < START_TIMEOUT * 10; i++)); do
		if [[ "$(four_letter ruok)" == imok ]]; then
			echo "zookeeper.sh: ZooKeeper running on 127.0.0.1:$PORT (pid $pid, dir $DIR)"
			echo "zookeeper.sh: export MAGNETAR_TEST_ZK=127.0.0.1:$PORT"
			return 0
		fi
		if ! kill -0 "$pid" 2>/dev/null; then
			rm -f "$PIDFILE"
			echo "zookeeper.sh: ZooKeeper exited during startup; last lines of $LOG:" >&2
			tail -n 30 "$LOG" >&2 || true
			exit 1
		fi
		sleep 0.1
	done
	echo "zookeeper.sh: ZooKeeper did not answer ruok on 127.0.0.1:$PORT within ${START_TIMEOUT}s; last lines of $LOG:" >&2
	tail -n 30 "$LOG" >&2 || true
	kill "$pid" 2>/dev/null || true
	rm -f "$PIDFILE"
	exit 1
}

status() {
	local pid
	if [[ "$(four_letter ruok)" == imok ]]; then
		if pid=$(running); then
			echo "zookeeper.sh: ZooKeeper running on 127.0.0.1:$PORT (pid $pid)"
		else
			echo "zookeeper.sh: a ZooKeeper not started by this script answers on 127.0.0.1:$PORT"
		fi
		four_letter srvr | grep -E '^(Zookeeper version|Mode|Connections)' || true
		return 0
	fi
	if pid=$(running); then
		die "ZooKeeper (pid $pid) is running but does not answer on 127.0.0.1:$PORT; see $LOG"
	fi
	die "no ZooKeeper on 127.0.0.1:$PORT; run scripts/zookeeper.sh start"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
status) status ;;
*)
	echo "usage: $0 start|stop|status" >&2
	exit 2
	;;
esac
