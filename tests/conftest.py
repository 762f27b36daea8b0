"""Shared fixtures: a fresh CPU session per test, the `cuda` marker's skip rule, and the test
manifest plugin (a `--junitxml` run writes F.manifest.json: export-trust's test evidence)."""
from __future__ import annotations

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


@pytest.fixture
def cpu_session():
    with use_session(Session("cpu")) as session:
        yield session
