#!/usr/bin/env bash
# One device call's work for the GPU evidence of issues 34/35: every test marked `cuda` (the
# hostile catalogue's CUDA kernels, the exhaustive plugin path, the new generator classes against
# the native kernels) beside the mutation table on CUDA, then the quick CUDA campaign through the
# isolated judge. The CUDA mutation tests are left to the table, which runs the same planted bugs
# and correct kernels over the same seeds. Logs go under $OUT; a short table is printed last.
#   TEST_WORKERS, TABLE_JOBS, CAMPAIGN_JOBS: parallelism; TEST_LIMIT, TABLE_LIMIT, CAMPAIGN_LIMIT:
#   seconds before each part is stopped (the device call's own limit is 600 s)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
git rev-parse --short HEAD >> "$OUT/gpu.txt" 2>/dev/null
t0=$(date +%s)
( timeout "${TABLE_LIMIT:-400}" python3 scripts/mutation_table.py --device cuda \
    --jobs "${TABLE_JOBS:-7}" > "$OUT/mutation-cuda.txt" 2>&1
  echo "rc=$?" >> "$OUT/mutation-cuda.txt"; echo "table $(( $(date +%s) - t0 )) s" \
    >> "$OUT/mutation-cuda.txt" ) &
mpid=$!
timeout "${TEST_LIMIT:-400}" python3 -m pytest -m cuda -n "${TEST_WORKERS:-8}" -q \
    -p no:cacheprovider --durations=25 --junitxml="$OUT/junit-cuda.xml" \
    --ignore=tests/test_cuda_mutations.py --ignore=tests/test_cuda_mutations_history.py \
    ${GPU_TESTS:-tests/} > "$OUT/pytest-cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/pytest-cuda.txt"
t1=$(date +%s)
wait $mpid
t2=$(date +%s)
timeout "${CAMPAIGN_LIMIT:-100}" python3 -m conformance.cli run --device cuda --quick \
    --suite campaign --jobs "${CAMPAIGN_JOBS:-12}" --fresh --no-progress \
    --evidence-dir "$OUT/ev" > "$OUT/campaign-cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/campaign-cuda.txt"
t3=$(date +%s)
tar czf "$OUT/ev-cuda.tgz" -C "$OUT" ev && rm -rf "$OUT/ev"
echo "== $(tr '\n' ' ' < "$OUT/gpu.txt")"
echo "pytest -m cuda: $(tail -2 "$OUT/pytest-cuda.txt" | tr '\n' ' ') ($((t1-t0)) s)"
echo "mutation table cuda: $(grep -c '| caught |' "$OUT/mutation-cuda.txt") caught rows," \
     "$(grep -c 'MISSED' "$OUT/mutation-cuda.txt") missed; $(tail -4 "$OUT/mutation-cuda.txt" | tr '\n' ' ') ($((t2-t0)) s)"
echo "campaign cuda: $(tail -4 "$OUT/campaign-cuda.txt" | tr '\n' ' ') ($((t3-t2)) s)"
grep -E "^FAILED|^ERROR|MISSED" "$OUT/pytest-cuda.txt" "$OUT/mutation-cuda.txt" | head -30
