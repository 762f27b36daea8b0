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


def pytest_collection_modifyitems(config, items):
    reorder(items, os.environ.get(ORDER_ENV_VAR))
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
