# Magnetar. `make run` starts a standalone broker; `make test` installs what
# the tests need, starts the test services and runs every test.

GO      ?= go
VERSION ?= $(shell git describe --tags --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell c=$$(git rev-parse --short=12 HEAD 2>/dev/null) && { git diff --quiet HEAD -- 2>/dev/null || c=$$c-dirty; echo $$c; } || echo unknown)
LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

.PHONY: build run test bench bench-go lint proto clean compat-franz cluster cluster-down

## build: compile bin/magnetar
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/magnetar ./cmd/magnetar

## run: build, then run `magnetar standalone` with data in ./data
run: build
	./bin/magnetar standalone --data-dir ./data

## test: install test dependencies (apt, as root), start ZooKeeper, lint, run every test with -race
test:
	scripts/test.sh test

## cluster: start a local cluster (ZooKeeper, 3 bookies, a broker) on loopback; cluster-down stops it
cluster:
	scripts/cluster.sh up

cluster-down:
	scripts/cluster.sh down

## compat-franz: run franz-go's own kgo integration tests against a standalone (also part of test)
compat-franz:
	scripts/compat-franz.sh

## bench: build, then `magnetar perf all`: machine limits, Magnetar standalone under Kafka and Pulsar
##        loads, kfake; one table, also written into docs/BENCHMARKS.md (output in bench-all.out; about 20 min on 2 cores).
##        BENCH_DIR=dir puts the data there (default: a temp dir); PROFILE=1 saves profiles in bench-profiles/
bench:
	BENCH_DIR='$(BENCH_DIR)' PROFILE='$(PROFILE)' scripts/bench.sh

## bench-go: like test, but run every Go benchmark (output also in bench.out)
bench-go:
	scripts/test.sh bench

## lint: gofmt (must list nothing) and go vet
lint:
	@unformatted=$$(gofmt -l $$(find . -name '*.go' -not -path './.git/*' -not -path '*/node_modules/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt: these files need formatting (run gofmt -w):"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

## proto: regenerate the protobuf Go code (protoc from apt's protobuf-compiler; protoc-gen-go built from go.mod's version)
proto:
	$(GO) build -o bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go
	protoc -I . --plugin=protoc-gen-go=bin/protoc-gen-go --go_out=. --go_opt=module=github.com/magnetar-io/magnetar \
		broker/msgpb/message.proto protocol/pulsar/pulsarpb/pulsar.proto

## clean: remove build output (not ./data)
clean:
	rm -rf bin bench.out bench-all.out
