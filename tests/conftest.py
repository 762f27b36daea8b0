"""Shared fixtures: a fresh CPU session per test, the `cuda` marker's skip rule, the test
manifest plugin (a `--junitxml` run writes F.manifest.json: export-trust's test evidence),
under scripts/sanitize.py the list of native kernels this process ran (its kernel coverage), and
TORCHLEAN_TEST_ORDER (reverse, or shuffle:SEED) to run the tests in another order: a test that
passes only after another in the same process is a defect `pytest -n N` finds by luck."""
from __future__ import annotations

import os
import sys

import pytest

from engine.session import Session, use_session

pytest_plugins = ["conformance.pytest_manifest"]

# The reference memo of each test process (conformance/references/memo.py) holds 1 GiB here
# instead of a judge's 256 MiB: the in-process campaigns of the mutation tests ask it for the same
# references test after test (every capsule of one op on one seed draws the same cases, and the
# fixed edge set is the same for every seed), and the edge set's references of a million elements
# take tens of MiB each, so 256 MiB dropped them before the next test of the op came. Answers are
# the same either way (a hit is a deep copy of what the reference computed, keyed by every input's
# bytes and parameter): only how often they are computed changes.
from conformance.references import memo as _reference_memo  # noqa: E402

_reference_memo.STORE.max_bytes = 1 << 30


ORDER_ENV_VAR = "TORCHLEAN_TEST_ORDER"


def reorder(items: list, order: str | None) -> None:
    """items reordered in place as `order` says: None or "" leaves them, "reverse" reverses them,
    "shuffle:SEED" shuffles them with that integer seed (the same order in every xdist worker,
    which must all collect the same list)."""
    if not order:
        return
    if order == "reverse":
        items.reverse()
        return
    kind, _, seed = order.partition(":")
    if kind == "shuffle" and seed.lstrip("-").isdigit():
        import random
        random.Random(int(seed)).shuffle(items)
        return
    raise pytest.UsageError(
        f"{ORDER_ENV_VAR}={order!r} is not a test order; expected 'reverse' or 'shuffle:SEED' "
        "with an integer seed (e.g. shuffle:7), or leave it unset for the file order")


# Tests that take far longer than the others, longest first, with the seconds they took: started
# first, so that under `pytest -n N` none of them begins late and becomes the run's tail. xdist's
# `load` scheduling (the default of -n) first hands each worker a block of consecutive tests
# (a quarter of its share: xdist/scheduler/load.py), so the long tests are dealt out one per
# block (long_first), not left together at the front: the H100 run of 2026-12-07f (`pytest -n 16`,
# the whole suite) gave worker gw0 the first 82 tests, five of these among them (423 s of work)
# while the sum of all tests' times over 16 was 330 s. Seconds from the H200 run of 2026-12-02e
# (evidence/h200-runs, `-m cuda -n 16`; "gpu"), from one process on a busy 2-core CPU machine
# ("cpu") and from the whole suite under `pytest -n 16` on an H100 (2026-12-07d, 2026-12-07f,
# evidence/h100-runs; "gpu*"). A name missing here only leaves a test in its place
# (tests/test_test_order.py checks that each is still collected).
LONG_FIRST = (
    "tests/test_reference_campaign.py::test_quick_campaign_over_every_reference_capsule",  # 402 cpu
    "tests/test_peer_reproducer.py::test_every_torch_reproducer_runs_under_an_installed_torch_"
    "on_the_cpu",                                                                       # 204 gpu*
    "tests/test_cluster.py::test_a_local_cluster_writes_the_local_runners_records",        # 113 cpu
    "tests/test_peer_reproducer.py::test_every_torch_script_computes_the_ops_value_and_gradient_"
    "on_the_cpu",                                                                       # 100 gpu*
    "tests/test_suites_cli.py::test_determinism_suite_writes_its_record",                  # 82 cpu
    "tests/test_lowp_binary.py::test_all_2_to_the_32_pairs_on_the_gpu",                     # 81 gpu
    "tests/test_cluster_cuda.py::test_the_cuda_campaign_on_local_cuda_writes_the_local_runners_"
    "records",                                                                              # 76 gpu
    "tests/test_cuda_flags.py::test_exp_default_and_ftz",                                   # 75 gpu
    "tests/test_cuda_flags.py::test_exp_ftz_sampled_sweep",                                 # 59 gpu
    "tests/test_peer_contracts.py::test_a_peers_convention_is_a_difference_not_a_"
    "failure",                                                                          # 55 gpu*
    "tests/test_hostile_kernels.py::test_the_run_fails_and_says_why",                   # 54 gpu*
    "tests/test_peer_reproducer.py::test_every_jax_reproducer_gives_a_verdict_under_the_"
    "installed_jax",                                                                    # 53 gpu*
    "tests/test_peer_reproducer.py::test_every_jax_script_computes_the_ops_value_and_"
    "gradient",                                                                         #  ? gpu*
    "tests/test_conformance_cli.py::test_run_prints_progress_and_a_summary_and_exits_0",    # 52 cpu
    "tests/test_hostile_kernels.py::test_a_fork_that_waits_to_rewrite_the_record_does_not_"
    "outlive_the_run",                                                                  # 51 gpu*
    "tests/test_case_stream_digest.py::test_campaign_cases_are_byte_for_byte_the_committed_"
    "ones",                                                                                 # 47 cpu
    "tests/test_ulp_table_cuda.py::test_every_installed_implementation_fills_its_cells",  # 46 gpu*
    "tests/test_mpmath_backends.py::test_references_are_bit_for_bit_the_same_under_both_mpmath_"
    "backends",                                                                         # 43 cpu
    "tests/test_determinism.py::test_cuda_deterministic_mode_is_bitwise_identical",         # 43 gpu
    "tests/test_conv_emulated.py::test_emulated_chunked_backward_repeats_and_modes_agree",  # 41 gpu*
    "tests/test_cuda_attention.py::test_blocked_key_data_never_leaks_into_the_forward",     # 26 gpu
)


def long_first(items: list, workers: int = 1) -> None:
    """LONG_FIRST's tests (every parametrization) moved to the front in its order, the others
    keeping theirs; with `workers` > 1 (an xdist worker's view of the run) the long ones are dealt
    round robin, one to each block of consecutive tests that xdist's load scheduling first hands a
    worker, each at its block's head."""
    rank = {nodeid: i for i, nodeid in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("[")[0], len(rank)))
    count = sum(item.nodeid.split("[")[0] in rank for item in items)
    if workers <= 1 or count == 0:
        return
    block = max((len(items) // workers) // 4, 2)     # xdist 3's first block (maxschedchunk unset)
    long, rest = items[:count], iter(items[count:])
    dealt = [long[w::workers] for w in range(workers)]
    order, late = [], []
    for share in dealt:
        order += share[:block]
        late += share[block:]
        order += [item for _, item in zip(range(block - len(share[:block])), rest)]
    items[:] = order + late + list(rest)


@pytest.hookimpl(trylast=True)    # after `-m`/`-k` deselection: xdist schedules what is left
def pytest_collection_modifyitems(config, items):
    order = os.environ.get(ORDER_ENV_VAR)
    if order:
        reorder(items, order)
    else:
        long_first(items, getattr(config, "workerinput", {}).get("workercount", 1))
    from engine.runtime.native import probe, RuntimeState
    state, detail = probe()
    if state is RuntimeState.native_available:
        return
    skip = pytest.mark.skip(reason=f"needs a native CUDA runtime; this is {state.value}: {detail}")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def _fetched() -> list:
    loader = sys.modules.get("engine.runtime.loader")
    return list(getattr(loader, "_kernels", {})) if loader else []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TORCHLEAN_KERNEL_LOG_DIR set (scripts/sanitize.py sets it): after each test, the
    kernels it was the first in this process to fetch, with its time, appended to this process's
    files there at once (a run stopped at its time limit still says what it reached;
    scripts/sanitize_kernels.py gathers them, and `select` builds a kernel-complete selection)."""
    log_dir = os.environ.get("TORCHLEAN_KERNEL_LOG_DIR")
    if not log_dir:
        yield
        return
    import time
    before, start = set(_fetched()), time.perf_counter()
    yield
    new = [k for k in _fetched() if k not in before]
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import sanitize_kernels
    sanitize_kernels.write_reached(Path(log_dir), new, os.getpid(),
                                   [(item.nodeid, time.perf_counter() - start, new)])


@pytest.fixture
def cpu_session():
    with use_session(Session("cpu")) as session:
        yield session
