"""conformance/exhaustive/ and conformance/cluster/ are packages named by their concept (they were
exhaustive_*.py and cluster*.py): each submodule is reached by its own name (a name the package's
__init__ imports never hides one), the old flat modules are gone, and the commands that run them
still answer."""
from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {"conformance.exhaustive": {"cli", "fused", "judge", "plan", "refs"},
            "conformance.cluster": {"exhaustive", "suites"}}


@pytest.mark.parametrize("name", sorted(PACKAGES))
def test_each_submodule_is_its_packages_attribute(name):
    package = importlib.import_module(name)
    subs = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert subs == PACKAGES[name]
    for sub in sorted(subs):
        module = importlib.import_module(f"{name}.{sub}")
        held = getattr(package, sub)
        assert isinstance(held, types.ModuleType) and held is module, \
            f"{name}.{sub} is shadowed by {held!r} in {name}/__init__.py"


def test_the_flat_modules_are_gone():
    flat = sorted(p.name for p in (REPO / "conformance").glob("*.py")
                  if p.name.startswith(("exhaustive", "cluster")))
    assert flat == []


@pytest.mark.parametrize("args, wanted", [
    (["exhaustive", "--help"], "--stride"),
    (["run", "--help"], "--cluster SPEC"),
])
def test_the_commands_still_answer(args, wanted):
    out = subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and wanted in out.stdout, out.stderr
