#!/usr/bin/env bash
# gpubench beside nccl-tests itself, on the same GPU and the same NCCL library (docs/validation.md,
# "Beside nccl-tests"). Builds nccl-tests from NVIDIA's public source with nvcc against the NCCL
# of the Python wheel, then runs all_reduce, all_gather, reduce_scatter, alltoall and sendrecv
# with -g 1 -b 8 -e 1G -f 4 and gpubench's same sweep, alternating, REPS times each; the ratio of
# gpubench's time to nccl-tests' per size and placement (median over the pairs of runs) goes to
# side-by-side.txt. Then both at 1 GiB in graph mode (-G 5), both at 8 B (in place is the call
# overhead alone), and `gpubench calibrate` of the hgx-h200 preset from gpubench's runs and its
# copy inside the GPU.
#   scripts/gpu-vs-nccl-tests.sh OUT_DIR
# NCCL_TESTS_SRC: the nccl-tests source tree (default .gpu/nccl-tests; never committed: export it
# from a clone with `git archive`). GPUBENCH_BIN: a built gpubench (default: go build). REPS: 3.
# MAX_BYTES: the sweep's largest size and the graph runs' size (1G; cmd/gpubench's dry run of this
# script on the stand-in libraries takes a smaller one).
set -euo pipefail
out=${1:?usage: scripts/gpu-vs-nccl-tests.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd) # paths given are taken from where the script was run
[ -z "${GPUBENCH_BIN:-}" ] || GPUBENCH_BIN=$(cd "$(dirname "$GPUBENCH_BIN")" && pwd)/$(basename "$GPUBENCH_BIN")
[ -z "${NCCL_TESTS_SRC:-}" ] || NCCL_TESTS_SRC=$(cd "$NCCL_TESTS_SRC" && pwd)
cd "$(dirname "$0")/.."
src=$(cd "${NCCL_TESTS_SRC:-.gpu/nccl-tests}" && pwd)
reps=${REPS:-3}
max=${MAX_BYTES:-1G}
: >"$out/summary.txt"
. scripts/step.sh # step NAME COMMAND...

if [ -n "${GPUBENCH_BIN:-}" ]; then
  gb=$GPUBENCH_BIN
elif command -v go >/dev/null; then
  step build-gpubench go build -trimpath -o "$out/gpubench" ./cmd/gpubench
  gb=$out/gpubench
else
  echo "gpu-vs-nccl-tests: no Go here: build gpubench elsewhere (make gpu-bundle) and set GPUBENCH_BIN" >&2
  exit 2
fi
cuda=${CUDA_HOME:-/usr/local/cuda} # nccl-tests takes nvcc from CUDA_HOME
if [ -z "${CUDA_HOME:-}" ] && command -v nvcc >/dev/null; then cuda=$(dirname "$(dirname "$(command -v nvcc)")"); fi

# The wheel's NCCL: its headers and libnccl.so.2. nccl-tests links -lnccl, so a folder holds
# include/ and a libnccl.so naming the wheel's library.
wheel=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__) if n.__file__ else list(n.__path__)[0])')
lib=$wheel/lib/libnccl.so.2
home=$out/nccl-home
mkdir -p "$home/lib"
ln -sfn "$wheel/include" "$home/include"
ln -sf "$lib" "$home/lib/libnccl.so"
ln -sf "$lib" "$home/lib/libnccl.so.2"
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | awk 'NR == 1 { gsub(/[ .]/, ""); print }')
{ date -u +%FT%TZ; nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv; nvcc --version | tail -2
  echo "NCCL: $lib"
  python3 -c 'import importlib.metadata as m; print(*sorted({d.metadata["Name"] + " " + d.version for d in m.distributions() if "nccl" in (d.metadata["Name"] or "").lower()}))'
} >"$out/machine.txt" 2>&1 || true
build=$out/nccl-tests-build
step build-nccl-tests make -C "$src/src" -j"$(nproc)" build BUILDDIR="$build" MPI=0 NCCL_HOME="$home" \
  CUDA_HOME="$cuda" NVCC_GENCODE="-gencode=arch=compute_$cc,code=sm_$cc"
export LD_LIBRARY_PATH=$home/lib:$cuda/lib64:${LD_LIBRARY_PATH:-} # the wheel's NCCL, nvcc's cudart

status=0
mkdir -p "$out/nccl-tests" "$out/gpubench"
sweep=(-g 1 -b 8 -e "$max" -f 4)
for rep in $(seq 1 "$reps"); do
  for c in all_reduce all_gather reduce_scatter alltoall sendrecv; do
    step "nccl-tests/$c.$rep" "$build/${c}_perf" "${sweep[@]}" || status=1
    step "gpubench/$c.$rep" "$gb" "${c//_/}" --backend cuda --nccl-lib "$lib" "${sweep[@]}" || status=1
  done
done

# Graph mode at 1 GiB (the last run's out-of-place 776 µs against 504 without it), and the call
# at 8 B over 1000 iterations (in place it is the call overhead alone), alternating.
for rep in $(seq 1 "$reps"); do
  step "nccl-tests/graph.$rep" "$build/all_reduce_perf" -g 1 -b "$max" -e "$max" -G 5 || status=1
  step "gpubench/graph.$rep" "$gb" allreduce --backend cuda --nccl-lib "$lib" -g 1 -b "$max" -e "$max" -G 5 || status=1
  step "nccl-tests/8b.$rep" "$build/all_reduce_perf" -g 1 -b 8 -e 8 -n 1000 -w 100 || status=1
  step "gpubench/8b.$rep" "$gb" allreduce --backend cuda --nccl-lib "$lib" -g 1 -b 8 -e 8 -n 1000 -w 100 || status=1
done

# Per size and placement, the median over the pairs of runs of gpubench's time over nccl-tests',
# as gpubench compare reads both tables.
for c in all_reduce all_gather reduce_scatter alltoall sendrecv graph 8b; do
  for rep in $(seq 1 "$reps"); do
    "$gb" compare "$out/nccl-tests/$c.$rep.out" "$out/gpubench/$c.$rep.out" --output json >"$out/compare.$c.$rep.json" || [ $? -eq 3 ] || status=1
  done
done
python3 - "$out" "$reps" "$max" >"$out/side-by-side.txt" <<'EOF' || status=1
import json, statistics, sys
out, reps, top = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print("# gpubench time / nccl-tests time, median of %d alternated pairs; -g 1 -b 8 -e %s -f 4" % (reps, top))
print("%-18s %12s %10s %10s" % ("collective", "size", "out-of-place", "in-place"))
worst, n, within = 0.0, 0, 0
names = {"graph": "all_reduce -G 5", "8b": "all_reduce -n 1000"}
for c in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "sendrecv", "graph", "8b"):
    ratios = {}
    for rep in range(1, reps + 1):
        try:
            doc = json.load(open("%s/compare.%s.%d.json" % (out, c, rep)))
        except (OSError, ValueError):  # a run that failed: the rest of the table still comes out
            print("# %s, run %d: no comparison (summary.txt says why)" % (names.get(c, c), rep))
            continue
        for row in doc["comparisons"][0]["rows"]:
            old, new = row.get("old"), row.get("new")
            if not old or not new or not old.get("time_us") or new.get("time_us") is None:
                continue
            ratios.setdefault((row["size_bytes"], row["placement"]), []).append(new["time_us"] / old["time_us"])
    for size in sorted({s for s, _ in ratios}):
        cells = []
        for p in ("out_of_place", "in_place"):
            r = ratios.get((size, p))
            if not r:
                cells.append("-")
                continue
            m = statistics.median(r)
            n, within, worst = n + 1, within + (abs(m - 1) <= 0.02), max(worst, abs(m - 1))
            cells.append("%.3f" % m)
        print("%-18s %12d %10s %10s" % (names.get(c, c), size, cells[0], cells[1]))
print("# %d of %d within 2%%; furthest %.1f%% off" % (within, n, 100 * worst))
EOF

# The hgx-h200 preset calibrated from gpubench's sweeps of this GPU and its copy inside the GPU
# (gpubench p2p). One rank, a process for it, runs no algorithm and paces no launch of several
# GPUs: what is fitted is the local copy; calibrate lists what the runs did not constrain.
step gpubench/p2p "$gb" p2p --backend cuda --output json --size 64MiB || status=1
step calibrate "$gb" calibrate --topology hgx-h200 "$out"/gpubench/all_reduce.*.out "$out/gpubench/p2p.out" -o "$out/hgx-h200-calibrated.json" || status=1
exit $status
