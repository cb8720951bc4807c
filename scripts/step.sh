# step NAME COMMAND...: run COMMAND, keeping its stdout and stderr in $out/NAME.out and .err, and
# note its exit status and time in $out/summary.txt; returns its status. Sourced by the GPU
# scripts, which set out.
step() {
  local name=$1; shift
  local t0=$SECONDS rc=0
  "$@" >"$out/$name.out" 2>"$out/$name.err" || rc=$?
  echo "$name: exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
  return $rc
}
