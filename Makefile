# gpubench: `make run` builds and runs a real sweep (on the simulator when there is no GPU);
# `make test` runs every check CI runs.

GO      ?= go
VERSION ?= $(shell cat VERSION)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
BIN     := bin/gpubench
# go-nvml leaves NVML's symbols unresolved until they are called: the binary must bind lazily,
# even where the toolchain defaults to -z now.
LDFLAGS := -X main.version=$(VERSION) -X main.commitID=$(COMMIT) -extldflags=-Wl,-z,lazy
# A count of executions, not a duration: Go 1.26's fuzz coordinator can fail a target with "context
# deadline exceeded" when a -fuzztime duration ends while a starved worker is mid-call
# (go.dev/issue/75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME ?= 20000x
# Shrinking each input that finds new code takes up to 60 s by default: on a fresh machine, whose
# fuzz cache is empty, FuzzSimulate (whose every input runs the simulator) spent a minute there.
# A count bounds it the same way FUZZTIME bounds the run.
FUZZMIN ?= 200x
# go-nvml's cgo wraps every NVML function, some of which NVML marks deprecated: gcc's warnings
# about them say nothing about gpubench, and a new user reads them as a failed build.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations

.PHONY: all build run test vet lint fmt-check tidy-check unit cgocheck standin-check fuzz bench gpu-check gpu-bundle clean

all: build

build:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/gpubench

# The main job: an all-reduce sweep from 8 B to 8 GiB on every GPU (simulated DGX H100 without one).
run: build
	./$(BIN) allreduce --sizes 8B:8GB

test: fmt-check tidy-check vet lint standin-check unit cgocheck fuzz

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# go.mod and go.sum say exactly what the code imports.
tidy-check:
	$(GO) mod tidy -diff

vet:
	$(GO) vet ./...
	CGO_ENABLED=0 $(GO) vet ./...

# staticcheck (honnef.co/go/tools), pinned: dead code, misused APIs, style slips that vet leaves.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	$(GO) run $(STATICCHECK) ./...

# Each package's tests must end well inside TIMEOUT (go test applies it per package's test binary),
# even under -race on two busy cores: no test runs for long, the simulator is fast instead.
#
# Under -race each test binary runs on one processor (GOMAXPROCS=1, set for the test binaries
# alone by -exec; the packages still run two at a time). The race detector's shadow memory is
# paged in afresh whenever a large buffer is freed and another allocated, and on a virtual machine
# each such page fault in a process running on both processors stops the other one to flush its
# TLB: cmd/gpubench's race tests took 690 s with two processors and 345 s with one (2026-12-03,
# the development machine, idle). The detector finds races from the order of events, not from
# goroutines running at the same instant, so it finds the same ones; the second pass below runs
# every test on all processors.
#
# The race detector sleeps a second before a process exits (GORACE's atexit_sleep_ms, listed in
# go.dev/doc/articles/race_detector: to catch races with goroutines still running then), and
# tests that run gpubench in fresh processes (the test binary as the CLI: launches, Slurm, the
# GPU scripts' dry runs) start dozens, one after another: without the sleep four such tests took
# 35 s instead of 53.
TIMEOUT ?= 8m

unit:
	$(GO) test -race -count=1 -timeout $(TIMEOUT) -exec 'env GOMAXPROCS=1 GORACE=atexit_sleep_ms=0' ./...
	CGO_ENABLED=0 $(GO) test -count=1 -timeout $(TIMEOUT) ./...

# The cgo bindings under the strictest pointer checks.
cgocheck:
	GOEXPERIMENT=cgocheck2 $(GO) test -count=1 -timeout $(TIMEOUT) ./internal/cuda/... ./internal/nccl/...

# The stand-in CUDA runtime's own C tests (plain and under the address and UB sanitizers).
standin-check:
	$(MAKE) -C csrc check

# A short run of every fuzz target (go test fuzzes one package and one target at a time).
fuzz:
	$(GO) test ./internal/coll -run '^$$' -fuzz '^FuzzParseSizes$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/coll -run '^$$' -fuzz '^FuzzTestsEnv$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/gpu -run '^$$' -fuzz '^FuzzParseTopology$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/gpu -run '^$$' -fuzz '^FuzzParseDType$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/sim -run '^$$' -fuzz '^FuzzParseFault$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/sim -run '^$$' -fuzz '^FuzzParseNCCLList$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/sim -run '^$$' -fuzz '^FuzzTunerEnv$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/sim -run '^$$' -fuzz '^FuzzSimulate$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/p2p -run '^$$' -fuzz '^FuzzParsePairs$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/topo -run '^$$' -fuzz '^FuzzParseVisibleDevices$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/topo -run '^$$' -fuzz '^FuzzParseBusID$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/topo -run '^$$' -fuzz '^FuzzSysfsValues$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/diag -run '^$$' -fuzz '^FuzzParsers$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/diag -run '^$$' -fuzz '^FuzzParseACSControl$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/diag -run '^$$' -fuzz '^FuzzEnvChecks$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/results -run '^$$' -fuzz '^FuzzRead$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/results -run '^$$' -fuzz '^FuzzParseThreshold$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/launch -run '^$$' -fuzz '^FuzzGreet$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/launch -run '^$$' -fuzz '^FuzzFirstHost$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/launch -run '^$$' -fuzz '^FuzzAddressFlag$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/launch -run '^$$' -fuzz '^FuzzDetect$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/launch -run '^$$' -fuzz '^FuzzAddressEnv$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/launch -run '^$$' -fuzz '^FuzzCountCPUs$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/plan -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/plan -run '^$$' -fuzz '^FuzzSetup$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/plan -run '^$$' -fuzz '^FuzzParseZeRO$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/plot -run '^$$' -fuzz '^FuzzParseImageSize$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/burnin -run '^$$' -fuzz '^FuzzParseIgnoredXIDs$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)
	$(GO) test ./internal/burnin -run '^$$' -fuzz '^FuzzParseCollectives$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMIN) -timeout $(TIMEOUT)

# CPU seconds and peak memory of simulated 8B:8GB all-reduce and all-to-all sweeps at 8 to 8,192
# GPUs, loading 1,024 nodes, a rendezvous of 1,024 ranks, and 16 one-rank processes against one
# process, at the default data cap and at one where moving the data dominates (docs/model.md,
# "Scale").
bench:
	$(GO) test ./cmd/gpubench -run '^$$' -bench '^(BenchmarkSweep|BenchmarkLoadTopology|BenchmarkLoadWideNodes)$$' -benchtime 1x -timeout 10m
	$(GO) test ./internal/launch -run '^$$' -bench '^BenchmarkRendezvous$$' -benchtime 2x -timeout 5m
	$(GO) test ./internal/sim -run '^$$' -bench '^BenchmarkJoinedTimingOnlyCall$$' -benchtime 4000x -timeout 5m
	scripts/world-cost.sh
	scripts/world-cost.sh --sim-data-cap 256M

# On a machine with a GPU: the real path end to end, every output written under OUT.
gpu-check:
	scripts/gpu-check.sh $(or $(OUT),gpu-check-out)

# For a GPU machine without Go: gpubench and the test binaries of the packages with GPU tests, in
# BUNDLE (default .gpu); there, GPUBENCH_BUNDLE=BUNDLE scripts/gpu-check.sh OUT.
gpu-bundle:
	$(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(or $(BUNDLE),.gpu)/gpubench ./cmd/gpubench
	$(GO) test -c -o $(or $(BUNDLE),.gpu)/tests/internal/p2p.test ./internal/p2p

clean:
	rm -rf bin .gpu
