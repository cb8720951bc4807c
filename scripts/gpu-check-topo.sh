#!/usr/bin/env bash
# The topo part of the GPU check: runs `gpubench topo` on this machine's GPUs in every output form
# and writes each into OUT_DIR (topo.txt, topo.json, topo.dot, topo-p2p-CAP.txt, each with a .err
# beside it for stderr); then reads topo.json back on the simulator (topo-sim.txt) and checks that
# it prints the same connection matrix. NICs the topology file leaves out (their link is down) may
# make the NIC rows differ, which is reported but does not fail; any difference between GPUs fails.
#   scripts/gpu-check-topo.sh OUT_DIR GPUBENCH
set -euo pipefail
usage="usage: scripts/gpu-check-topo.sh OUT_DIR GPUBENCH"
out=${1:?$usage}
bin=${2:?$usage}
mkdir -p "$out"
status=0

run() { # run FILE ARGS...: gpubench topo ARGS > FILE, stderr to FILE.err
  local file=$1 rc=0
  shift
  "$bin" topo "$@" >"$out/$file" 2>"$out/$file.err" || rc=$?
  echo "topo $*: exit $rc"
  if [ "$rc" -ne 0 ]; then status=1; fi
}

# matrix FILE [gpus]: the connection matrix of a topo table; with "gpus", only GPU rows and columns.
matrix() {
  awk -v gpus="${2:-}" '
    /^ +GPU0 / { on = 1; n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^GPU[0-9]+$/) n++ }
    on && /^$/ { exit }
    on && gpus == "" { print; next }
    on && /^ +GPU0 / { line = ""; for (i = 1; i <= n; i++) line = line " " $i; print line; next }
    on && $1 ~ /^GPU[0-9]+$/ { line = $1; for (i = 2; i <= n + 1; i++) line = line " " $i; print line }
  ' "$1"
}

run topo.txt --backend cuda
run topo.json --backend cuda --output json
run topo.dot --backend cuda --output dot
for cap in read write nvlink atomics; do
  run "topo-p2p-$cap.txt" --backend cuda --p2p "$cap"
done

if [ -s "$out/topo.json" ] && [ -s "$out/topo.txt" ]; then
  run topo-sim.txt --backend sim --topology "$out/topo.json"
  if diff <(matrix "$out/topo.txt") <(matrix "$out/topo-sim.txt") >"$out/topo-roundtrip.diff"; then
    echo "round trip: the simulator prints the same matrix"
  elif diff <(matrix "$out/topo.txt" gpus) <(matrix "$out/topo-sim.txt" gpus) >/dev/null; then
    echo "round trip: the GPUs match; NIC rows differ (see topo-roundtrip.diff and the NIC legend)"
  else
    echo "round trip: the matrices differ (see topo-roundtrip.diff)"
    status=1
  fi
fi
if command -v dot >/dev/null; then
  dot -Tsvg "$out/topo.dot" -o "$out/topo.svg" || status=1
fi
exit $status
