#!/usr/bin/env bash
# Runs franz-go's own integration tests (pkg/kgo, the version in go.mod)
# against a real `magnetar standalone`: `make compat-franz`, and part of
# `make test`.
#
# 1. Builds bin/magnetar and starts a standalone on free loopback ports
#    with its data in a temp dir (log: $TMP/magnetar.log, printed on
#    failure).
# 2. Copies franz-go's module source from the module cache (downloading it
#    if needed) to a writable temp dir — never into the repository.
# 3. Runs `go test ./pkg/kgo` with KGO_SEEDS pointing at the standalone and
#    KGO_TEST_RF=1, skipping only the transaction test (TestTxnEtl):
#    transactions are not supported yet. Tests franz-go itself skips for
#    missing broker features (share groups, KIP-848, SASL) skip.
# 4. Stops the standalone (SIGTERM; it must exit 0) and removes the temp dir.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
log() { echo "compat-franz: $*" >&2; }

version=$("$GO" list -m -f '{{.Version}}' github.com/twmb/franz-go)
tmp=$(mktemp -d /tmp/magnetar-compat-franz.XXXXXX)
pid=
cleanup() {
	status=$?
	if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			log "standalone did not stop on SIGTERM; killing it"
			kill -KILL "$pid" 2>/dev/null || true
			status=1
		elif ! wait "$pid"; then
			log "standalone exited non-zero on SIGTERM"
			status=1
		fi
	fi
	if ((status != 0)) && [[ -f $tmp/magnetar.log ]]; then
		log "standalone log (last 100 lines):"
		tail -n 100 "$tmp/magnetar.log" >&2
	fi
	rm -rf "$tmp"
	exit "$status"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

log "building bin/magnetar"
make --no-print-directory build >&2
http=$(freeport) pulsar=$(freeport) kafka=$(freeport) bookie=$(freeport)
./bin/magnetar standalone --data-dir "$tmp/data" --http-listen "127.0.0.1:$http" \
	--pulsar-listen "127.0.0.1:$pulsar" --kafka-listen "127.0.0.1:$kafka" --bookie-listen "127.0.0.1:$bookie" \
	>"$tmp/magnetar.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
	if curl -fs "http://127.0.0.1:$http/status" >/dev/null 2>&1; then break; fi
	kill -0 "$pid" 2>/dev/null || { log "standalone exited during startup"; exit 1; }
	sleep 0.2
done
curl -fs "http://127.0.0.1:$http/status" >/dev/null || { log "standalone did not become ready in 60s"; exit 1; }

log "franz-go $version: copying pkg/kgo's source from the module cache"
src=$("$GO" mod download -json "github.com/twmb/franz-go@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
cp -r "$src" "$tmp/franz-go"
chmod -R u+w "$tmp/franz-go"

log "running franz-go $version's kgo tests against 127.0.0.1:$kafka (skipping TestTxnEtl)"
start=$(date +%s)
(cd "$tmp/franz-go/pkg/kgo" && KGO_SEEDS="127.0.0.1:$kafka" KGO_TEST_RF=1 "$GO" test -count=1 -timeout 10m -skip '^TestTxnEtl$' .)
log "franz-go's kgo tests passed in $(($(date +%s) - start))s"
