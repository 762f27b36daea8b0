#!/usr/bin/env bash
# The main job: the tests that check capsules' values, every conformance suite (campaign, guards,
# determinism, allocator cap), the earned-trust export, and the HTML evidence report.
#   scripts/check.sh          on any machine (the CPU reference path)
#   scripts/check.sh --cuda   on a GPU machine as well: demands a native CUDA runtime, failing with
#                             the runtime's own message when there is none, and adds the GPU suite
#   scripts/check.sh --cuda --sanitize   the GPU tests under compute-sanitizer's memcheck,
#                             racecheck, initcheck and synccheck instead (scripts/sanitize.py: each
#                             tool must first report its planted bug). Only that runs: the evidence
#                             (junit, campaigns, trust, timings) must come from plain runs, and a
#                             sanitized suite is 10-100x slower, so the two jobs are separate runs.
# TORCHLEAN_CHECK_CAMPAIGN_ARGS replaces the campaign's default `--quick`; TORCHLEAN_BENCH_ARGS
#   the benchmarks' (`--quick` here: a table per benchmark in the job's time; set it empty for
#   the full runs that performance claims quote).
# TORCHLEAN_GPU_SUITE_OUT: where the GPU suite's logs and tables go (default
#   reports/evidence/cuda/gpu-suite).
# TORCHLEAN_CHECK_TESTS=all runs every test (default `evidence`: the tests marked `capsules`,
#   which export-trust counts; scripts/test.sh runs the whole suite).
# TORCHLEAN_CHECK_CPU_PART=skip (with --cuda): the GPU machine runs only what needs the GPU: the
#   tests marked `cuda` (of those the job selects), the suites and trust on cuda, PyTorch's
#   peers, the GPU suite and the report. The CPU part (the other tests, the suites and trust on cpu) is then the job of a
#   plain scripts/check.sh on another machine, for the same commit; the default, `run`, runs both.
# Every job ends with a table of its stages' wall seconds and statuses (scripts/stages.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
cuda=0
sanitize=0
for arg in "$@"; do
    case "$arg" in
        --cuda) cuda=1 ;;
        --sanitize) sanitize=1 ;;
        *) echo "check.sh: unknown argument '$arg'; expected --cuda, --cuda --sanitize or" \
                "nothing" >&2; exit 2 ;;
    esac
done
if [ "$sanitize" = 1 ] && [ "$cuda" = 0 ]; then
    echo "check.sh: --sanitize was given without --cuda; the sanitizers check the GPU tests, so" \
         "run scripts/check.sh --cuda --sanitize on a GPU machine" >&2
    exit 2
fi
cpu_part=${TORCHLEAN_CHECK_CPU_PART:-run}
case "$cpu_part" in
    run) ;;
    skip) if [ "$cuda" = 0 ] || [ "$sanitize" = 1 ]; then
              echo "check.sh: TORCHLEAN_CHECK_CPU_PART=skip leaves the GPU part only, so it" \
                   "needs --cuda (without --sanitize); unset it to run the CPU job" >&2
              exit 2
          fi ;;
    *) echo "check.sh: TORCHLEAN_CHECK_CPU_PART='$cpu_part' is not a choice; expected 'run'" \
            "(the default: the CPU part too) or 'skip' (with --cuda: the GPU part only)" >&2
       exit 2 ;;
esac
# Which tests this job runs. `evidence` (the default): the tests that check a capsule's values
# (marked `capsules`), which export-trust counts as each capsule's test evidence; the rest of the
# suite tests the harness and the runtime themselves (planted bugs, hostile kernels, the command
# line, error models) and is scripts/test.sh's job, which CI runs on every commit and a GPU
# machine runs for the tests marked cuda. `all`: every test here as well.
check_tests=${TORCHLEAN_CHECK_TESTS:-evidence}
case "$check_tests" in
    evidence|all) ;;
    *) echo "check.sh: TORCHLEAN_CHECK_TESTS='$check_tests' is not a choice; expected" \
            "'evidence' (the default: the tests export-trust counts) or 'all' (every test)" >&2
       exit 2 ;;
esac
source scripts/python_env.sh || exit 1
source scripts/stages.sh
# Ctrl-C or a SIGTERM ends the job: the running stage gets the signal too (the foreground one from
# the terminal) and records itself interrupted; the parts running beside it are stopped here
stopped() {
    trap - INT TERM
    beside_stop
    echo "check.sh: stopped by SIG$1; the stages that ended are listed above, what ran beside" \
         "them was stopped" >&2
    exit "$2"
}
trap 'stopped INT 130' INT
trap 'stopped TERM 143' TERM

if [ "$cuda" = 1 ]; then
    "$PY" - <<'PY' || exit 1
import sys
from engine.errors import NativeRuntimeUnavailable
from engine.runtime.native import probe, require_native_runtime
try:
    require_native_runtime()
except NativeRuntimeUnavailable as exc:
    print(f"check.sh --cuda: {exc}", file=sys.stderr)
    sys.exit(1)
print(f"native CUDA runtime: {probe()[1]}")
PY
fi
if [ "$sanitize" = 1 ]; then
    # TORCHLEAN_SANITIZE_TESTS, _TOOLS, _WORKERS, _TIMEOUT, _PARALLEL, _OPTIONS: what runs
    # (see the script)
    exec "$PY" scripts/sanitize.py
fi

mkdir -p reports/evidence
devices=cpu
[ "$cuda" = 1 ] && devices="cpu cuda"
if [ "$cuda" = 1 ] && [ "$cpu_part" = skip ]; then
    devices=cuda
    echo "== the CPU part is skipped (TORCHLEAN_CHECK_CPU_PART=skip): only tests marked cuda," \
         "suites and trust on cuda; the rest is scripts/check.sh's job on another machine"
fi
case "$check_tests:$devices" in
    evidence:cpu) marks=(-m "capsules and not cuda") ;;
    evidence:cuda) marks=(-m "capsules and cuda") ;;
    evidence:*) marks=(-m capsules) ;;
    all:cuda) marks=(-m cuda) ;;
    all:*) marks=() ;;
esac
# Tests whose whole check a later stage of this job makes again, left to that stage here (CI's
# scripts/test.sh runs them): the quick campaign over every reference capsule, which "conformance
# suites on cpu" runs over every CPU capsule, failing on any failure. (The quick determinism
# suite's test is run: it also requires default mode to repeat bit for bit, which the stage
# records without failing.)
repeated=()
if [[ " $devices " == *" cpu "* ]]; then
    repeated=(--deselect tests/test_reference_campaign.py::test_quick_campaign_over_every_reference_capsule)
fi
# nproc without the OpenMP variables it would honour (a caller may have set them for its own
# threads): the cores this job may use
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 2)
share() {   # share PARTS: the cores divided by PARTS, at least 1
    echo $(( cores / $1 > 0 ? cores / $1 : 1 ))
}
tests_stage() {   # tests_stage WORKERS
    echo "== tests (${check_tests}: ${marks[*]:-every test})"
    stage "tests" "$PY" -m pytest -n "${TORCHLEAN_TEST_WORKERS:-$1}" -q \
        --junitxml=reports/evidence/junit.xml "${repeated[@]}" "${marks[@]}" tests/
}
suites_on() {   # suites_on DEVICE JOBS: every conformance suite of one device
    echo "== conformance suites on $1"
    stage "conformance suites on $1" "$PY" -m conformance.cli run --device "$1" \
        --no-progress --jobs "$2" ${TORCHLEAN_CHECK_CAMPAIGN_ARGS:---quick}
}
quietly() {   # a command whose standard output is not for this job's log
    "$@" > /dev/null
}
trust_on() {   # the trust one device earned, from its suites' records and the tests' report
    stage "export-trust on $1" quietly "$PY" -m conformance.cli export-trust --device "$1" \
        --tests reports/evidence/junit.xml
}
peer_audit() {   # PyTorch's CUDA kernels audited beside ours (an optional dependency)
    echo "== PyTorch's kernels: peer audit (aten.*)"
    # exit 1 is a verdict on PyTorch's kernels (what the audit is for), not a failure here;
    # a usage error (2), a harness error (3) or an interruption is
    stage "PyTorch's kernels: peer audit" --accept "0 1" "$PY" -m conformance.cli run \
        --device cuda --no-progress --jobs "$1" --plugin conformance.peers.torch_cuda:ENTRIES \
        ${TORCHLEAN_CHECK_CAMPAIGN_ARGS:---quick}
}
# The GPU suite's logs and tables go with this job's evidence (not to a caller's $OUT, which the
# suite alone writes to, nor to /tmp, where two jobs would overwrite each other's)
gpu_suite_out=${TORCHLEAN_GPU_SUITE_OUT:-$PWD/reports/evidence/cuda/gpu-suite}
gpu_examples() {   # the GPU suite's examples: they need the GPU, not a quiet one
    stage "GPU suite: examples" env OUT="$gpu_suite_out" TORCHLEAN_GPU_SKIP_TESTS=1 \
        TORCHLEAN_GPU_PART=examples bash scripts/gpu_suite.sh
}
export TORCHLEAN_BENCH_ARGS=${TORCHLEAN_BENCH_ARGS---quick}
have_torch_cuda=0
if [ "$cuda" = 1 ] && "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" \
        2>/dev/null; then
    have_torch_cuda=1
fi

if [ "$cuda" = 0 ]; then
    # one after another: on a few cores each stage takes them all
    tests_stage "${TORCHLEAN_TEST_WORKERS:-auto}"
    suites_on cpu "$cores"
    trust_on cpu
else
    # What needs no quiet GPU runs side by side, the cores shared and somewhat oversubscribed
    # (most of it is the judges' mpmath references on the CPU; a part that ends early leaves
    # its cores to the rest): the tests, the CPU suites, the GPU examples and, in the
    # foreground (its output live), the CUDA suites then PyTorch's audit; the timed benchmarks
    # come after, alone. The other parts' output is shown when all have ended, in this order.
    # PyTorch's audit follows the CUDA suites: both write the cuda evidence directory, which
    # one run at a time holds (its lock).
    # (every test, TORCHLEAN_CHECK_TESTS=all, is some ten times the evidence tests' work)
    beside tests_stage "$(share "$([ "$check_tests" = all ] && echo 2 || echo 4)")"
    [[ " $devices " == *" cpu "* ]] && beside suites_on cpu "$(share 4)"
    beside gpu_examples
    # the CUDA suites and PyTorch's audit take every core: while the parts beside them run the
    # cores are shared by the scheduler, and once those end (the CPU suites and the tests end
    # first) the foreground parts get the cores they leave instead of half the machine idling
    suites_on cuda "$cores"
    [ "$have_torch_cuda" = 1 ] && peer_audit "$cores"
    beside_join
    for device in $devices; do
        trust_on "$device"
    done
    if [ "$have_torch_cuda" = 1 ]; then
        echo "== PyTorch's kernels: bench_kernels"
        stage "bench_kernels" "$PY" benchmarks/bench_kernels.py \
            --json reports/evidence/cuda/bench-kernels.json \
            --table reports/evidence/cuda/bench-kernels.txt ${TORCHLEAN_BENCH_ARGS:-}
    else
        echo "== PyTorch's kernels: NOT audited and NOT benchmarked: torch with CUDA is not" \
             "importable here (pip install torch, a CUDA build); the report has no PyTorch page"
    fi
    echo "== GPU suite: benchmarks"
    # its tests are scripts/test.sh's (or the tests stage's, with TORCHLEAN_CHECK_TESTS=all)
    stage "GPU suite: benchmarks" env OUT="$gpu_suite_out" TORCHLEAN_GPU_SKIP_TESTS=1 \
        TORCHLEAN_GPU_PART=benchmarks bash scripts/gpu_suite.sh
fi

echo "== report"
stage "trust-boundaries --check" "$PY" -m reports trust-boundaries --check
stage "report" "$PY" -m reports report
stage_table "check.sh$([ "$cuda" = 1 ] && echo " --cuda"): each stage's wall time"
exit $stages_failed
