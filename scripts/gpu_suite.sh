#!/usr/bin/env bash
# The GPU suite (run on a CUDA machine; installs nothing): every test marked `cuda`, then the
# runtime, attention, convolution and spectral benchmarks, cnn_digits and fno1d on cuda, then a short
# summary table. scripts/check.sh --cuda calls this.
# Logs and numbers go to $OUT when it is set (the device tool's output folder), else to /tmp.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PY:-python3}"
out="${OUT:-/tmp}"
mkdir -p "$out"

workers=()
if "$PY" -c "import xdist" 2>/dev/null; then
    workers=(-n "${TORCHLEAN_GPU_TEST_WORKERS:-4}")
fi

tests_rc=0
if [ "${TORCHLEAN_GPU_SKIP_TESTS:-0}" != 1 ]; then   # check.sh --cuda has run them already
    echo "== GPU tests (pytest -m cuda)"
    "$PY" -m pytest -q -m cuda "${workers[@]}" -p no:cacheprovider tests/ 2>&1 \
        | tee "$out/gpu_tests.log"
    tests_rc=${PIPESTATUS[0]}
fi

echo "== quickstart on cuda, and its losses against the CPU run under the derived bound"
"$PY" -m engine.cli quickstart_mlp --device cuda --steps 2 --seed 2026 --show-backend 2>&1 \
    | tee "$out/quickstart_cuda.log"
quick_rc=${PIPESTATUS[0]}
"$PY" -m conformance.quickstart_bound 2>&1 | tee "$out/quickstart_bound.log"
bound_rc=${PIPESTATUS[0]}

echo "== runtime benchmark"
"$PY" benchmarks/bench_runtime.py --json "$out/bench.json" --table "$out/bench_table.txt" \
    ${TORCHLEAN_BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
bench_rc=${PIPESTATUS[0]}

echo "== attention and layer norm benchmark"
"$PY" benchmarks/bench_attention.py --json "$out/bench_attention.json" \
    --table "$out/bench_attention_table.txt" ${TORCHLEAN_BENCH_ARGS:-} 2>&1 \
    | tee "$out/bench_attention.log"
attn_rc=${PIPESTATUS[0]}

echo "== convolution and pooling benchmark"
"$PY" benchmarks/bench_conv.py --json "$out/bench_conv.json" --table "$out/bench_conv_table.txt" \
    ${TORCHLEAN_BENCH_ARGS:-} 2>&1 | tee "$out/bench_conv.log"
conv_rc=${PIPESTATUS[0]}

echo "== spectral and scan benchmark"
"$PY" benchmarks/bench_spectral.py --json "$out/bench_spectral.json" \
    --table "$out/bench_spectral_table.txt" ${TORCHLEAN_BENCH_ARGS:-} 2>&1 \
    | tee "$out/bench_spectral.log"
spectral_rc=${PIPESTATUS[0]}

echo "== cnn_digits on cuda (deterministic mode)"
"$PY" -m engine.cli cnn_digits --device cuda --deterministic 2>&1 | tee "$out/cnn_digits_cuda.log"
digits_rc=${PIPESTATUS[0]}

echo "== fno1d on cuda (deterministic mode)"
"$PY" -m engine.cli fno1d --device cuda --deterministic 2>&1 | tee "$out/fno1d_cuda.log"
fno_rc=${PIPESTATUS[0]}

echo
echo "== GPU suite summary"
[ -f "$out/gpu_tests.log" ] && printf '%-12s %s\n' "tests" \
    "$(grep -E '[0-9]+ (passed|failed|error)' "$out/gpu_tests.log" | tail -1)"
printf '%-12s %s\n' "quickstart" "$([ "$quick_rc" = 0 ] && echo ok || echo "FAILED (rc=$quick_rc)")"
printf '%-12s %s\n' "loss bound" "$([ "$bound_rc" = 0 ] && echo held || echo "EXCEEDED (rc=$bound_rc)")"
printf '%-12s %s\n' "benchmark" "$([ "$bench_rc" = 0 ] && echo ok || echo "FAILED (rc=$bench_rc)")"
printf '%-12s %s\n' "attention" "$([ "$attn_rc" = 0 ] && echo ok || echo "FAILED (rc=$attn_rc)")"
printf '%-12s %s\n' "conv bench" "$([ "$conv_rc" = 0 ] && echo ok || echo "FAILED (rc=$conv_rc)")"
printf '%-12s %s\n' "spectral" "$([ "$spectral_rc" = 0 ] && echo ok || echo "FAILED (rc=$spectral_rc)")"
printf '%-12s %s\n' "fno1d" "$([ "$fno_rc" = 0 ] && grep 'held-out' "$out/fno1d_cuda.log" || echo "FAILED (rc=$fno_rc)")"
printf '%-12s %s\n' "cnn_digits" "$([ "$digits_rc" = 0 ] && grep 'held-out' "$out/cnn_digits_cuda.log" || echo "FAILED (rc=$digits_rc)")"
if [ -f "$out/bench_table.txt" ]; then
    grep -E "ratio engine/torch|add / copy|cupy default pool|engine.ops.add|torch.add " \
        "$out/bench_table.txt" | sed 's/^ */  /'
fi
if [ -f "$out/bench_attention_table.txt" ]; then
    grep -E "^(sdpa|layer_norm)|^case" "$out/bench_attention_table.txt" | sed 's/^/  /'
fi
for t in bench_conv_table bench_spectral_table; do
    [ -f "$out/$t.txt" ] && grep -E "^(conv|pool|rfft|fft_fno|selective_scan)" "$out/$t.txt" \
        | sed 's/^/  /'
done
[ "$tests_rc" = 0 ] && [ "$quick_rc" = 0 ] && [ "$bound_rc" = 0 ] && [ "$bench_rc" = 0 ] \
    && [ "$attn_rc" = 0 ] && [ "$conv_rc" = 0 ] && [ "$spectral_rc" = 0 ] && [ "$digits_rc" = 0 ] \
    && [ "$fno_rc" = 0 ]
