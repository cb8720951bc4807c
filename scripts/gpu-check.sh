#!/usr/bin/env bash
# The GPU check: builds gpubench and runs its real path on this machine's GPUs, writing every
# output (and how long each step took) into the folder given as the only argument. It fails when
# anything fails, including a test that would otherwise skip for want of a GPU.
#   scripts/gpu-check.sh OUT_DIR
# On a machine without Go, build here with `make gpu-bundle` and set GPUBENCH_BUNDLE to the folder
# it makes (the gpubench binary, and the test binaries of the packages with GPU tests).
set -euo pipefail
out=${1:?usage: scripts/gpu-check.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd) # steps run in other folders too
export PATH="/usr/local/go/bin:$PATH"

. scripts/step.sh # step NAME COMMAND...

: >"$out/summary.txt"
{ date -u +%FT%TZ; uname -a; nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv 2>&1 || true; } >"$out/machine.txt"
if [ -n "${GPUBENCH_BUNDLE:-}" ]; then
  GPUBENCH_BUNDLE=$(cd "$GPUBENCH_BUNDLE" && pwd)
  bin=$GPUBENCH_BUNDLE/gpubench
  echo "build: prebuilt $bin" | tee -a "$out/summary.txt"
else
  step build go build -trimpath -ldflags=-extldflags=-Wl,-z,lazy -o "$out/gpubench" ./cmd/gpubench
  bin=$out/gpubench
fi
status=0
step version "$bin" version || status=1
step p2p "$bin" p2p --backend cuda || status=1
step p2p-json "$bin" p2p --backend cuda --output json --size 64MiB || status=1
if [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ]; then
  step p2p-sweep "$bin" p2p --backend cuda --pairs 0-1 --sweep 4K:1G:x4 --size 64MiB || status=1
fi
step copy-reference python3 scripts/copy_bw_reference.py || status=1
ngpus=$(nvidia-smi -L 2>/dev/null | wc -l)
g=$(( ngpus < 8 ? ngpus : 8 ))
for c in allreduce allgather reducescatter broadcast reduce alltoall sendrecv; do
  step "$c" "$bin" "$c" --backend cuda -g "$g" --sizes 8B:1GB:x8 -c 1 -T 60 || status=1
done
step allreduce-graph "$bin" allreduce --backend cuda -g "$g" --sizes 8B:1GB:x8 -G 5 -T 60 || status=1
step allreduce-json "$bin" allreduce --backend cuda -g "$g" --sizes 8B:1GB:x32 --output json -T 60 || status=1
step allreduce-per-iter "$bin" allreduce --backend cuda -g "$g" --sizes 1M:1GB:x32 --per-iter --out "$out/allreduce-per-iter.jsonl" -T 60 || status=1
step allreduce-launch-time "$bin" allreduce --backend cuda -g "$g" --sizes 8B:1GB:x8 -C 1 -T 60 || status=1 # -C 1: the host's launch time a call, by size
if [ "$g" -ge 2 ]; then # one rank per process, through the rendezvous and ncclCommInitRank
  step allreduce-2proc bash -c 'for r in 1 0; do RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=29577 "$1" allreduce --backend cuda --sizes 8B:1GB:x8 -T 60 & done; s=0; for p in $(jobs -p); do wait $p || s=1; done; exit $s' _ "$bin" || status=1
fi
step allreduce-1rank "$bin" allreduce --backend cuda -g 1 --sizes 8B:1GB:x134217728 -T 60 || status=1
step allreduce-reference python3 scripts/allreduce_reference.py || status=1
step diag "$bin" diag --backend cuda --output json || [ $? -eq 3 ] || status=1 # 3: the machine has a fault diag names
step burnin bash -c '"$1" burnin --backend cuda --duration 60s --baseline 20s --sizes 1M:1G:x32 --metrics 127.0.0.1:9466 --hold 20s --out "$2/burnin.jsonl" --output json & sleep 45; python3 -c "import urllib.request,sys; sys.stdout.write(urllib.request.urlopen(\"http://127.0.0.1:9466/metrics\").read().decode())" >"$2/burnin-scrape.txt" && grep -q "^gpubench_gpu_temperature_celsius" "$2/burnin-scrape.txt" || exit 1; wait $!' _ "$bin" "$out" || [ $? -eq 3 ] || status=1 # 60 s burn-in with a scrape; 3: a check failed
if [ -x scripts/gpu-check-topo.sh ]; then step topo scripts/gpu-check-topo.sh "$out" "$bin" || status=1; fi
if [ -n "${GPUBENCH_BUNDLE:-}" ]; then # each test binary runs in its package's folder
  for t in $(cd "$GPUBENCH_BUNDLE/tests" && find . -name '*.test' | sort); do
    pkg=${t#./}
    pkg=${pkg%.test}
    (cd "$pkg" && GPUBENCH_REQUIRE_GPU=1 step "tests-${pkg//\//-}" "$GPUBENCH_BUNDLE/tests/$pkg.test" -test.count=1 -test.run 'RealGPU|GPU' -test.v) || status=1
  done
else
  GPUBENCH_REQUIRE_GPU=1 step tests go test -count=1 -run 'RealGPU|GPU' -v ./... || status=1
fi
exit $status
