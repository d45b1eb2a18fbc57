#!/usr/bin/env bash
# Bounded libFuzzer runs of the tests/fuzz targets (scripts/test.sh runs all of them).
#
#   tests/fuzz/fuzz.sh [TARGET...]          default: every fuzz_<TARGET>.cpp
#   FUZZ_SECONDS=60      time per target
#   FUZZ_JOBS=2          targets run at once
#   FUZZ_BUILD_DIR=DIR   the clang build (default build-fuzz), configured here if missing
#
# Exit 1 when any target crashes, trips a sanitizer, times out on one input or fails a
# property: the input is copied to tests/fuzz/corpus/<target>/regression-<sha1> so that, once
# fixed, every later replay (suite fuzz-replay) checks it. New coverage found during a run stays
# in DIR/fuzz-work and is never written into the checked-in corpus.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-2}
build=${FUZZ_BUILD_DIR:-build-fuzz}
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do
    f=${f##*/fuzz_}
    targets+=("${f%.cpp}")
  done
fi

if [[ ! -f $build/build.ninja ]]; then
  CXX=${FUZZ_CXX:-clang++} meson setup "$build" -Dfuzzing=true >/dev/null
fi
if ! grep -q '"name": "fuzzing", "value": true' "$build/meson-info/intro-buildoptions.json"; then
  echo "fuzz.sh: $build is not a -Dfuzzing=true build; use another FUZZ_BUILD_DIR" >&2
  exit 2
fi
ninja -C "$build" "${targets[@]/#/tests/fuzz/fuzz_}"

# run TARGET: one bounded run; writes DIR/fuzz-work/TARGET/{log,status}.
run() {
  local t=$1 work=$build/fuzz-work/$1
  rm -rf "$work/artifacts"
  mkdir -p "$work/found" "$work/artifacts"
  local opts=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$work/artifacts/")
  [[ -f tests/fuzz/$t.dict ]] && opts+=(-dict="tests/fuzz/$t.dict")
  local rc=0
  "$build/tests/fuzz/fuzz_$t" "${opts[@]}" "$work/found" "tests/fuzz/corpus/$t" \
    >"$work/log" 2>&1 || rc=$?
  echo "$rc" >"$work/status"
}

rm -f "$build"/fuzz-work/*/status
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  run "$t" &
done
wait

failed=0
for t in "${targets[@]}"; do
  work=$build/fuzz-work/$t
  rc=$(cat "$work/status" 2>/dev/null || echo missing)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 || true)
  if [[ $rc == 0 ]]; then
    echo "fuzz $t: ok, ${execs:-?} executions in ${seconds}s, ${cov:-cov: ?}"
    continue
  fi
  failed=1
  echo "fuzz $t: FAILED (exit $rc)"
  tail -40 "$work/log" | sed 's/^/  /'
  for a in "$work"/artifacts/*; do
    [[ -f $a ]] || continue
    keep=tests/fuzz/corpus/$t/regression-$(sha1sum "$a" | cut -c1-16)
    cp "$a" "$keep"
    echo "  input saved as $keep: fix the bug, then commit it as a regression test"
  done
done
exit "$failed"
