#!/usr/bin/env bash
# `make unit`: pytest over tests/, with the cluster binaries built while the tests run.
#
# Only the tests marked `cluster_bins` (the chart, apiserver and alerting-rule tests) need what
# `make cluster-build` and `make promtool` put in e2e/.cluster/bin. On a fresh machine that Go
# build takes 20-25 minutes of both cores, and the rest of the suite leaves about half of the
# CPU idle (it mostly waits on real brokers, elections and timeouts). So the build runs at the
# lowest CPU priority (nice 19: it gets what the tests leave) while every other test runs, and
# the `cluster_bins` tests run after it. With the binaries already built the build is a stamp
# check and this is plain pytest in two passes. Arguments go to both pytest runs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PY:-.venv/bin/python}"
LOG="$ROOT/e2e/.cache/cluster-bins-build.log"
mkdir -p "$(dirname "$LOG")"

say() { printf '[unit %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

start=$SECONDS
say "building the cluster binaries and promtool at nice 19 while the other tests run (log: $LOG)"
# setsid: the build is a process group of its own, so an interrupted run stops all of it
setsid bash -c 'nice -n 19 bash e2e/cluster/build.sh && nice -n 19 bash tools/build-promtool.sh' \
  >"$LOG" 2>&1 </dev/null &
build=$!
stop_build() {
  if kill -0 "$build" 2>/dev/null; then
    say "stopping the background build (process group $build)"
    kill -TERM -- "-$build" 2>/dev/null || true
  fi
}
trap stop_build EXIT

rc=0
run() {  # pytest's 5 (nothing selected, e.g. -k matched only the other pass) is no failure
  "$PY" -m pytest -q -m "$1" "${@:2}" tests || { local r=$?; [[ $r == 5 ]] || rc=$r; }
}
run "not cluster_bins" "$@"
say "tests without the cluster binaries: rc=$rc after $((SECONDS - start)) s; waiting for the build"
if ! wait "$build"; then
  tail -30 "$LOG" >&2
  say "the cluster binaries build failed (whole log: $LOG)" >&2
  exit 1
fi
trap - EXIT
say "cluster binaries ready after $((SECONDS - start)) s: $(grep -h 'built in\|up to date' "$LOG" | tr '\n' ' ')"
run cluster_bins "$@"
say "all tests done in $((SECONDS - start)) s: rc=$rc"
exit "$rc"
