#!/usr/bin/env bash
# One device call's work for this session's GPU evidence (issue 34/35/36): the GPU tests, the
# mutation table on CUDA, the quick CUDA campaign through the isolated judge/kernel path.
# Writes logs under $OUT and prints a short table last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/pip.log" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
t0=$(date +%s)
( timeout 380 python3 scripts/mutation_table.py --device cuda --jobs 10 > "$OUT/mutation-cuda.txt" 2>&1; echo "rc=$?" >> "$OUT/mutation-cuda.txt" ) &
mpid=$!
timeout 150 python3 -m pytest -m cuda -n 6 -q -p no:cacheprovider --junitxml="$OUT/junit-cuda.xml" \
    ${GPU_TESTS:-} > "$OUT/pytest-cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/pytest-cuda.txt"
t1=$(date +%s)
timeout 210 python3 -m conformance.cli run --device cuda --quick --suite campaign --jobs 8 --no-progress --fresh --evidence-dir "$OUT/ev-cuda" > "$OUT/campaign-cuda.txt" 2>&1
echo "rc=$?" >> "$OUT/campaign-cuda.txt"
t2=$(date +%s)
wait $mpid
t3=$(date +%s)
tar czf "$OUT/ev-cuda.tgz" -C "$OUT" ev-cuda 2>/dev/null && rm -rf "$OUT/ev-cuda"
echo "== $(cat "$OUT/gpu.txt")"
echo "pytest -m cuda: $(tail -2 "$OUT/pytest-cuda.txt" | tr '\n' ' ') ($((t1-t0)) s)"
echo "campaign cuda: $(grep 'capsules without' "$OUT/campaign-cuda.txt") $(tail -1 "$OUT/campaign-cuda.txt") ($((t2-t1)) s)"
echo "mutation table cuda: $(tail -3 "$OUT/mutation-cuda.txt" | tr '\n' ' ') (done at $((t3-t0)) s)"
grep -E "FAILED|Error" "$OUT/pytest-cuda.txt" | head -30
