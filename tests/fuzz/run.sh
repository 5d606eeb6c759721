#!/usr/bin/env bash
# Replays the seed corpus of every fuzz target, then fuzzes each policy for a
# bounded time. Fails on the first mismatch with the model, crash, leak, hang
# or sanitizer report.
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_POLICY]     (default 60)
#
# BUILD_DIR is a clang build configured with -DPADDOCK_FUZZ=ON whose
# paddock_fuzz_* targets are built (CI uses build/asan). New inputs go to
# BUILD_DIR/fuzz/corpus-<policy>, crashing inputs to BUILD_DIR/fuzz/artifacts;
# the checked-in corpus (tests/fuzz/corpus/<policy>) is only read. To keep a
# new input as a seed, minimise it into the corpus:
#   paddock_fuzz_<policy> -merge=1 tests/fuzz/corpus/<policy> <dir-or-file>
#
#   PADDOCK_FUZZ_JOBS  policies fuzzed at once (default 2, one per core)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [[ $# -lt 1 || ! -d $1 ]]; then
  echo "usage: $0 BUILD_DIR [SECONDS_PER_POLICY]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=${2:-60}
jobs=${PADDOCK_FUZZ_JOBS:-2}
policies=(naive_jitter single_flight xfetch soft_ttl)
out=$build/fuzz
mkdir -p "$out/artifacts"

binary() { echo "$build/tests/fuzz/paddock_fuzz_$1"; }

for policy in "${policies[@]}"; do
  if [[ ! -x $(binary "$policy") ]]; then
    echo "fuzz: $(binary "$policy") is missing (configure with -DPADDOCK_FUZZ=ON and build)" >&2
    exit 1
  fi
done

# 1. The seed corpus, every input once.
for policy in "${policies[@]}"; do
  log=$out/$policy.replay.log
  if ! "$(binary "$policy")" -runs=0 "$here/corpus/$policy" >"$log" 2>&1; then
    tail -n 80 "$log" >&2
    echo "fuzz: replaying corpus/$policy failed (log: $log)" >&2
    exit 1
  fi
  echo "fuzz: corpus/$policy replayed: $(find "$here/corpus/$policy" -type f | wc -l) inputs"
done

# 2. Bounded fuzzing, `jobs` policies at a time.
fuzz() {
  local policy=$1
  mkdir -p "$out/corpus-$policy"
  "$(binary "$policy")" \
    -max_total_time="$seconds" \
    -timeout=10 \
    -rss_limit_mb=2048 \
    -max_len=1024 \
    -print_final_stats=1 \
    -artifact_prefix="$out/artifacts/$policy-" \
    "$out/corpus-$policy" "$here/corpus/$policy" >"$out/$policy.log" 2>&1
}

failed=()
for ((i = 0; i < ${#policies[@]}; i += jobs)); do
  batch=("${policies[@]:i:jobs}")
  pids=()
  for policy in "${batch[@]}"; do
    fuzz "$policy" &
    pids+=($!)
  done
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}" || failed+=("${batch[$j]}")
  done
done

for policy in "${policies[@]}"; do
  summary=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out/$policy.log" | tail -n 1 || true)
  echo "fuzz: $policy: ${summary:-no summary (see $out/$policy.log)}"
done
if ((${#failed[@]} > 0)); then
  for policy in "${failed[@]}"; do
    echo "fuzz: $policy FAILED; last lines of $out/$policy.log:" >&2
    tail -n 60 "$out/$policy.log" >&2
  done
  echo "fuzz: failing inputs are in $out/artifacts; reproduce with" >&2
  echo "  $(binary '<policy>') $out/artifacts/<file>" >&2
  exit 1
fi
echo "fuzz: clean (${seconds} s per policy)"
