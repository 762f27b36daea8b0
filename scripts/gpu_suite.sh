#!/usr/bin/env bash
# The GPU suite (run on a CUDA machine; installs nothing): every test marked `cuda`, the
# quickstart eager and graph-replayed, the runtime, graph, attention, convolution and spectral
# benchmarks, cnn_digits and fno1d on cuda, then a short summary table (each step's wall seconds
# and status). scripts/check.sh --cuda calls this. Logs and numbers go to $OUT when it is set (the
# device tool's output folder), else to /tmp.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PY:-python3}"
out="${OUT:-/tmp}"
mkdir -p "$out"
bench_args=(${TORCHLEAN_BENCH_ARGS:-})
source scripts/stages.sh
part=${TORCHLEAN_GPU_PART:-all}
case "$part" in
    all|examples|benchmarks) ;;
    *) echo "gpu_suite.sh: TORCHLEAN_GPU_PART='$part' is not a choice; expected 'all'," \
            "'examples' or 'benchmarks'" >&2
       exit 2 ;;
esac

# logged LOG COMMAND...: COMMAND's output shown and kept in LOG; COMMAND's exit status
logged() {
    local log=$1
    shift
    "$@" 2>&1 | tee "$log"
    return "${PIPESTATUS[0]}"
}
# step NAME LOG COMMAND...: run COMMAND as a timed stage, its output shown and kept in $out/LOG.
step() {
    local name=$1 log=$2
    shift 2
    echo "== $name"
    stage "$name" logged "$out/$log" "$@"
}
bench() {   # bench NAME SCRIPT: a benchmark with its --json and --table under $out
    step "$1" "$1.log" "$PY" "benchmarks/$2.py" --json "$out/$1.json" --table "$out/$1_table.txt" \
        "${bench_args[@]}"
}

workers=()
if "$PY" -c "import xdist" 2>/dev/null; then
    workers=(-n "${TORCHLEAN_GPU_TEST_WORKERS:-4}")
fi
if [ "${TORCHLEAN_GPU_SKIP_TESTS:-0}" != 1 ]; then   # check.sh --cuda has run them already
    step tests gpu_tests.log "$PY" -m pytest -q -m cuda "${workers[@]}" -p no:cacheprovider tests/
fi
if [ "$part" != benchmarks ]; then
    step quickstart quickstart_cuda.log \
        "$PY" -m engine.cli quickstart_mlp --device cuda --steps 2 --seed 2026 --show-backend
    step "loss bound" quickstart_bound.log "$PY" -m conformance.quickstart_bound
    step "quickstart graph" quickstart_graph.log \
        "$PY" -m engine.cli quickstart_mlp --device cuda --graph --deterministic --show-backend
    step cnn_digits cnn_digits_cuda.log "$PY" -m engine.cli cnn_digits --device cuda --deterministic
    step fno1d fno1d_cuda.log "$PY" -m engine.cli fno1d --device cuda --deterministic
fi
if [ "$part" != examples ]; then
    bench bench bench_runtime
    bench bench_graphs bench_graphs
    bench bench_attention bench_attention
    bench bench_conv bench_conv
    bench bench_spectral bench_spectral
fi

stage_table "GPU suite summary$([ "$part" != all ] && echo " ($part)")"
[ -f "$out/gpu_tests.log" ] && printf '%-16s %s\n' "tests" \
    "$(grep -E '[0-9]+ (passed|failed|error)' "$out/gpu_tests.log" | tail -1)"
[ "$part" != benchmarks ] && grep -h "held-out" "$out/fno1d_cuda.log" "$out/cnn_digits_cuda.log" \
    2>/dev/null | sed 's/^/  /'
[ "$part" = examples ] && exit $stages_failed
summary() {   # summary TABLE REGEX: the lines of a benchmark table worth a glance
    [ -f "$out/$1" ] && grep -E "$2" "$out/$1" | sed 's/^ */  /'
}
summary bench_table.txt "ratio engine/torch|add / copy|cupy default pool|engine.ops.add|torch.add "
summary bench_graphs_table.txt "/ torch"
summary bench_attention_table.txt "^(sdpa|layer_norm)|^case"
summary bench_conv_table.txt "^(conv|pool)"
summary bench_spectral_table.txt "^(rfft|fft_fno|selective_scan)"
exit $stages_failed
