"""Shared fixtures: a fresh CPU session per test, the `cuda` marker's skip rule, the test
manifest plugin (a `--junitxml` run writes F.manifest.json: export-trust's test evidence), and,
under scripts/sanitize.py, the list of native kernels this process ran (its kernel coverage)."""
from __future__ import annotations

import os
import sys

import pytest

from engine.session import Session, use_session

pytest_plugins = ["conformance.pytest_manifest"]


def pytest_collection_modifyitems(config, items):
    from engine.runtime.native import probe, RuntimeState
    state, detail = probe()
    if state is RuntimeState.native_available:
        return
    skip = pytest.mark.skip(reason=f"needs a native CUDA runtime; this is {state.value}: {detail}")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


_FIRSTS: list[tuple[str, float, list]] = []   # (test, seconds, kernels it fetched first here)


def _fetched() -> list:
    loader = sys.modules.get("engine.runtime.loader")
    return list(getattr(loader, "_kernels", {})) if loader else []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With TORCHLEAN_KERNEL_LOG_DIR set: which kernels each test was the first in this process
    to fetch, and its time (scripts/sanitize_kernels.py `select` builds a kernel-complete test
    selection for the sanitizers from it)."""
    if not os.environ.get("TORCHLEAN_KERNEL_LOG_DIR"):
        yield
        return
    import time
    before, start = set(_fetched()), time.perf_counter()
    yield
    new = [k for k in _fetched() if k not in before]
    _FIRSTS.append((item.nodeid, time.perf_counter() - start, new))


def pytest_sessionfinish(session, exitstatus):
    """With TORCHLEAN_KERNEL_LOG_DIR set (scripts/sanitize.py sets it): write the kernels the
    loader handed out in this process, and each test's first fetches (each pytest-xdist worker
    writes its own files)."""
    log_dir = os.environ.get("TORCHLEAN_KERNEL_LOG_DIR")
    if not log_dir:
        return
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    import sanitize_kernels
    sanitize_kernels.write_reached(Path(log_dir), _fetched(), os.getpid(), _FIRSTS)


@pytest.fixture
def cpu_session():
    with use_session(Session("cpu")) as session:
        yield session
