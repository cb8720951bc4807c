#!/usr/bin/env bash
# What simulating GPUs across processes costs against one process simulating them all: an 8B:1GB
# all-reduce on 16 simulated GPUs (two DGX H100), as 16 one-rank processes started as torchrun
# starts them on one host (its variables, a rendezvous on loopback), then as one process. Prints
# each run's CPU seconds, peak memory (rank 0's process, which serves the communicator's exchange,
# and the largest of the others), and the ratio of the CPU times. N changes the process count;
# arguments are added to both runs (--sim-data-cap 0: what the processes cost with no data to move).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-16}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/gpubench" ./cmd/gpubench
nodes=$(((N + 7) / 8))
args=(allreduce --backend sim --topology dgx-h100 --nodes "$nodes" --sizes 8B:1GB "$@")
port=$((20000 + RANDOM % 20000))
for r in $(seq 0 $((N - 1))); do
  RANK=$r WORLD_SIZE=$N LOCAL_RANK=$r LOCAL_WORLD_SIZE=$N MASTER_ADDR=127.0.0.1 MASTER_PORT=$port GPUBENCH_RUN_KEY=world-cost \
    /usr/bin/time -o "$tmp/time.$r" -f "%U %S %M" \
    "$tmp/gpubench" "${args[@]}" >"$tmp/out.$r" 2>"$tmp/err.$r" &
done
wait
/usr/bin/time -o "$tmp/time.one" -f "%U %S %M" "$tmp/gpubench" "${args[@]}" -g "$N" >"$tmp/out.one" 2>/dev/null
cmp -s <(grep -E '^ +[0-9]+ ' "$tmp/out.0" | awk '{print $1, $9, $13}') <(grep -E '^ +[0-9]+ ' "$tmp/out.one" | awk '{print $1, $9, $13}') ||
  echo "world-cost: the processes' #wrong column differs from one process's" >&2
for r in $(seq 0 $((N - 1))); do echo "$r $(cat "$tmp/time.$r")"; done | awk -v n="$N" -v one="$(cat "$tmp/time.one")" '
  { cpu += $2 + $3; if ($1 == 0) hub = $4; else if ($4 > rss) rss = $4 }
  END {
    split(one, o, " "); c1 = o[1] + o[2]
    printf "%d processes: %.2f CPU s in all, peak memory %.0f MB in rank 0 (the exchange), at most %.0f MB in the others\n", n, cpu, hub / 1024, rss / 1024
    printf "1 process:    %.2f CPU s, peak memory %.0f MB\n", c1, o[3] / 1024
    printf "ratio:        %.1fx the CPU of one process\n", cpu / c1
  }'
