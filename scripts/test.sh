#!/usr/bin/env bash
# Runs the tests (or benchmarks) the way `make test` (or `make bench-go`) and CI
# do, on a fresh Debian machine with Go installed:
#
#   scripts/test.sh test    # lint, go test -race ./..., then the compat tests (default)
#   scripts/test.sh bench   # go test -bench ./..., output also in bench.out (make bench-go)
#
# 1. Installs the Debian packages the tests need when they are missing
#    (apt-get, as root; otherwise it says what to install and stops).
# 2. Starts a throwaway ZooKeeper (scripts/zookeeper.sh) and exports
#    MAGNETAR_TEST_ZK; stops it on every exit path.
# 3. Runs the tests and exits with their status.
#
# Safe to run twice in a row: installed packages are skipped and
# zookeeper.sh restarts its server with a fresh data dir.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case "$mode" in
test | bench) ;;
*)
	echo "usage: $0 [test|bench]" >&2
	exit 2
	;;
esac

GO=${GO:-go}
ZK_PORT=${MAGNETAR_ZK_PORT:-21810}

log() { echo "test.sh: $*" >&2; }

# --- 1. packages --------------------------------------------------------------

# Debian packages the tests need, each with the check that it is there.
# Add later needs (kcat, ...) here.
missing=()
need() {
	local pkg=$1
	shift
	"$@" >/dev/null 2>&1 || missing+=("$pkg")
}
need zookeeper test -x /usr/share/zookeeper/bin/zkServer.sh # scripts/zookeeper.sh
need default-jre-headless command -v java                   # ZooKeeper's JVM
need gcc command -v gcc                                     # cgo, for go test -race
need kcat command -v kcat                                   # compat-tests/kafka: librdkafka's client
need nodejs command -v node                                 # compat-tests/kafka: kafkajs
need npm command -v npm                                     # compat-tests/kafka/js: npm ci
need g++ command -v g++                                     # npm ci: node-gyp builds lz4 (kafkajs-lz4)
need make command -v make                                   # npm ci: node-gyp
need python3 command -v python3                             # npm ci: node-gyp; compat-franz.sh
need curl command -v curl                                   # compat-franz.sh: waits on /status

if ((${#missing[@]})); then
	if ! command -v apt-get >/dev/null; then
		log "missing packages: ${missing[*]}; this script installs them with apt-get (Debian/Ubuntu)"
		exit 1
	fi
	if [[ $(id -u) -ne 0 ]]; then
		log "missing packages: ${missing[*]}"
		log "install them with: sudo apt-get install ${missing[*]}   (or run make test as root)"
		exit 1
	fi
	log "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
command -v "$GO" >/dev/null || {
	log "go not found; install Go (see go.mod for the version)"
	exit 1
}

# --- 2. services --------------------------------------------------------------

stop_services() {
	scripts/zookeeper.sh stop >&2 || log "stopping ZooKeeper failed"
}
# On INT/TERM exit with the conventional status so the EXIT trap runs and the
# caller sees the interruption.
trap 'exit 130' INT
trap 'exit 143' TERM
trap stop_services EXIT

scripts/zookeeper.sh start >&2
export MAGNETAR_TEST_ZK=127.0.0.1:$ZK_PORT

# --- 3. tests -----------------------------------------------------------------

if [[ $mode == test ]]; then
	make --no-print-directory lint
	# -race on 2 cores: slower, but races are the bugs this project can least afford.
	"$GO" test -race -count=1 -timeout 20m ./...
	# The Pulsar frame decoder meets whatever the network sends: fuzz it
	# briefly on every run (seeded with valid frames; a crasher fails the
	# run and is saved under testdata/fuzz).
	# A number of inputs rather than a duration: when a -fuzztime duration
	# runs out while a worker is busy, go test can fail with "context
	# deadline exceeded" though nothing crashed (seen on loaded 2-core CI).
	log "fuzzing the Pulsar frame decoder (120,000 inputs, about 20s)"
	"$GO" test -run '^$' -fuzz '^FuzzReadFrame$' -fuzztime 120000x ./protocol/pulsar/frame/
	# Its fast paths (SEND, message count) must agree with generic protobuf.
	log "fuzzing the Pulsar fast paths against generic protobuf (100,000 inputs, about 10s)"
	"$GO" test -run '^$' -fuzz '^FuzzFastPaths$' -fuzztime 100000x ./protocol/pulsar/frame/
	# The same for the Kafka request decoder and the record batch parser.
	log "fuzzing the Kafka request decoder and record batch parser (about 15s each)"
	"$GO" test -run '^$' -fuzz '^FuzzParseRequest$' -fuzztime 60000x ./protocol/kafka/
	"$GO" test -run '^$' -fuzz '^FuzzSplitRecordBatches$' -fuzztime 100000x ./broker/
	# compat-tests/ is its own module (the real clients' dependencies stay
	# out of the root go.mod), so ./... above does not reach it. Its tests
	# build the magnetar binary themselves (with -race: a data race in the
	# server under real clients fails the run when it exits) and talk to it
	# over loopback only.
	log "compat tests: installing kafkajs (npm ci in compat-tests/kafka/js)"
	(cd compat-tests/kafka/js && npm ci --no-audit --no-fund)
	log "compat tests: real clients against magnetar (compat-tests/)"
	(cd compat-tests && "$GO" vet ./... && MAGNETAR_COMPAT_RACE=1 "$GO" test -count=1 -timeout 15m ./...)
	log "franz-go's own integration tests against magnetar (scripts/compat-franz.sh)"
	scripts/compat-franz.sh
else
	"$GO" test -run '^$' -bench . -benchmem -timeout 60m ./... | tee bench.out
fi
