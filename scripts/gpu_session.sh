#!/usr/bin/env bash
# One device call's work for this session's GPU evidence (issues 34/35): the hostile catalogue's
# CUDA kernels and the exhaustive plugin path (GPU_TESTS), and the mutation table on CUDA in
# parallel workers. Writes logs under $OUT and prints a short table last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
t0=$(date +%s)
( timeout ${TABLE_LIMIT:-200} python3 scripts/mutation_table.py --device cuda --jobs 13 \
    > "$OUT/mutation-cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/mutation-cuda.txt" ) &
mpid=$!
timeout ${TEST_LIMIT:-150} python3 -m pytest -m cuda -n 2 -q -p no:cacheprovider \
    --junitxml="$OUT/junit-cuda.xml" ${GPU_TESTS:-} > "$OUT/pytest-cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/pytest-cuda.txt"
t1=$(date +%s)
wait $mpid
t2=$(date +%s)
echo "== $(cat "$OUT/gpu.txt")"
echo "pytest -m cuda: $(tail -2 "$OUT/pytest-cuda.txt" | tr '\n' ' ') ($((t1-t0)) s)"
echo "mutation table cuda: $(grep -c '| caught |' "$OUT/mutation-cuda.txt") caught rows," \
     "$(grep -c 'MISSED' "$OUT/mutation-cuda.txt") missed; $(tail -3 "$OUT/mutation-cuda.txt" | tr '\n' ' ') ($((t2-t0)) s)"
grep -E "FAILED|MISSED" "$OUT/pytest-cuda.txt" "$OUT/mutation-cuda.txt" | head -20
