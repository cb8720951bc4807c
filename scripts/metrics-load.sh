#!/usr/bin/env bash
# Load on the metrics endpoint while a simulated burn-in runs: 200 concurrent scrapers on
# loopback for 30 seconds (CONC and DURATION change that: CONC=50 DURATION=10s for a quick
# before/after). Prints scrapes, errors and latency percentiles; the goal is no errors and p99
# under 50 ms on a quiet 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/.."
CONC=${CONC:-200}
DURATION=${DURATION:-30s}
tmp=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$tmp"' EXIT
go build -o "$tmp/gpubench" ./cmd/gpubench
go build -o "$tmp/scrapeload" ./scripts/scrapeload
: >"$tmp/err" # there before the burn-in opens it, for the sed below
"$tmp/gpubench" burnin --backend sim --duration 24h --metrics 127.0.0.1:0 --output json >/dev/null 2>"$tmp/err" &
pid=$!
for _ in $(seq 100); do
  addr=$(sed -n 's#.*metrics on http://\([^/]*\)/metrics.*#\1#p' "$tmp/err")
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { cat "$tmp/err"; exit 1; }
"$tmp/scrapeload" -url "http://$addr/metrics" -c "$CONC" -d "$DURATION"
