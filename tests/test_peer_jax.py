"""JAX as a peer (conformance/peers/jax_xla.py) under its own contract (jax_contract.py): its
conventions are differences, never failures, and every rule matches the values JAX 0.10.2's CPU
kernels returned (the counterexamples recorded in evidence/jax-cpu/without-contract, judged before
the contract existed); the live campaign runs where jax is installed (CI has none: skipped). What
the plugin asks of JAX on a GPU (no preallocation, CPU entries on the CPU device, float32 matmul)
is checked on a stand-in `jax`."""
from __future__ import annotations

import json
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance.peers.contract import ConventionCase
from conformance.peers.contracts import contract_for
from conformance.peers.jax_contract import contracts, with_conventions
from conformance.replay import decode_case
from engine.types import BackendOp as Op, Device

REPO = Path(__file__).resolve().parent.parent
EVIDENCE = REPO / "evidence" / "jax-cpu"
F32 = np.float32
SPEC = "conformance.peers.jax_xla:ENTRIES"


def _forward(op, x):
    """What the rules read of JAX's forward at those counterexamples (exp's and the reciprocal's
    are the overflowing ones; sqrt is IEEE's)."""
    with np.errstate(all="ignore"):
        return {"exp": np.exp, "inv": lambda v: F32(1) / v, "sqrt": np.sqrt}.get(
            op, np.zeros_like)(x).astype(F32)


def _explained(data: dict, failure: dict) -> bool:
    case = decode_case(data["case"])
    kind = "value" if failure["output"] == "value" else "grad"
    grad = None if kind == "value" else int(failure["output"][len("grad["):-1])
    cc = ConventionCase(tuple(case.inputs), case.params,
                        _forward(data["capsule"][len("xla."):], case.inputs[0]),
                        None if grad is None else case.cotangent, grad, daz=True)
    got = np.array([int(failure["got"], 16)], np.uint32).view(F32)[0]
    at = tuple(failure["element"])
    for convention in contracts()[data["capsule"]].for_output(kind):
        governed, value = convention.rule(cc)
        v = np.asarray(value, F32)[at]
        if bool(np.broadcast_to(governed, np.shape(value))[at]) and (
                v.view(np.uint32) == got.view(np.uint32) or (np.isnan(v) and np.isnan(got))):
            return True
    return False


def test_jaxs_recorded_values_are_its_conventions_and_its_accuracy_is_not():
    seen = {}
    for path in sorted((EVIDENCE / "without-contract" / "replays").glob("xla.*.json")):
        data = json.loads(path.read_text())
        if data["capsule"] not in with_conventions():
            continue
        for failure in data["failures"]:
            accuracy = failure["output"] == "value" and failure["reason"] == "exceeds-bound"
            assert _explained(data, failure) is not accuracy, (path.name, failure)
            seen[data["capsule"]] = seen.get(data["capsule"], 0) + 1
    assert set(seen) >= {"xla.abs", "xla.clamp", "xla.inv", "xla.max", "xla.min", "xla.scale"}


def test_the_recorded_campaign_under_jaxs_contract():
    """18 of 26 passed, their conventions listed; the 8 failures are accuracy (2 to 1.7e7 times
    our bound: XLA's CPU exp, tanh, logistic) and gelu's NaN at the infinities."""
    recs = {p.stem: json.loads(p.read_text())
            for p in (EVIDENCE / "with-contract").glob("xla.*.json")}
    failed = sorted(k for k, r in recs.items() if r["status"] != "passed")
    assert len(recs) == 26 and failed == [
        "xla.exp", "xla.gelu", "xla.log_softmax", "xla.mse_loss", "xla.sigmoid", "xla.softmax",
        "xla.softplus", "xla.tanh"]
    clauses = {k: set(r["differences"]["clauses"]) for k, r in recs.items()
               if r.get("differences", {}).get("clauses")}
    assert clauses["xla.max"] == {"nan-gradient-to-neither", "tie-returns-second-operand"}
    assert clauses["xla.abs"] == {"abs-gradient-select"}
    assert all(r["differences"]["peer"] == "JAX" for r in recs.values() if "differences" in r)
    # what stays a failure: accuracy, and gelu's IEEE evaluation of its formula at the infinities
    assert set(recs["xla.exp"]["failure_reasons"]) == {"exceeds-bound"}
    assert set(recs["xla.gelu"]["failure_reasons"]) == {"nan-mismatch", "vjp-nan-mismatch",
                                                        "exceeds-bound"}


def test_only_the_jax_peer_module_gets_jaxs_contract():
    assert contract_for(SPEC, "xla.max") is contracts()["xla.max"]
    assert contract_for("fixtures.plugins.numpy_peers:ENTRIES", "xla.max") is None


def test_live_jax_conventions_are_differences_not_failures():
    pytest.importorskip("jax")
    from conformance.campaign import Settings, run_campaign
    from conformance.peers.jax_xla import entries_for
    from engine.types import Device
    entry = next(e for e in entries_for(Device.cpu) if e.capsule.name == "xla.max")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ours = run_campaign(entry.capsule, entry.handler(), Settings.for_run(None, 3, True))
        peer = run_campaign(entry.capsule, entry.handler(), Settings.for_run(None, 3, True),
                            contract=contracts()["xla.max"])
    assert ours["status"] == "failed" and peer["status"] == "passed", peer["failure_reasons"]
    assert "nan-gradient-to-neither" in peer["differences"]["clauses"]


# --- on a GPU: what jax_xla.py asks of JAX, checked on a stand-in `jax` (no JAX here) -----------

class _Recorder:
    """A module stand-in whose every attribute is a function recording its call."""

    def __init__(self, calls: list) -> None:
        self._calls = calls

    def __getattr__(self, name):
        def fn(*args, **kwargs):
            self._calls.append((name, args, kwargs))
            return name
        return fn


@pytest.fixture
def jax_import(monkeypatch):
    """`import jax` served by a finder that records XLA_PYTHON_CLIENT_PREALLOCATE at the moment
    each of jax and jax.numpy is executed; the real modules (if any) are put back after."""
    import importlib.abc
    import importlib.util
    import os
    import sys
    seen: list = []

    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            seen.append((module.__name__, os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")))

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name in ("jax", "jax.numpy"):
                return importlib.util.spec_from_loader(name, Loader(), is_package=name == "jax")
            return None
    saved = {k: sys.modules.pop(k) for k in list(sys.modules) if k == "jax" or
             k.startswith("jax.")}
    monkeypatch.setattr(sys, "meta_path", [Finder()] + sys.meta_path)
    yield seen
    for k in [k for k in sys.modules if k == "jax" or k.startswith("jax.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_jax_is_told_not_to_preallocate_before_it_is_imported(jax_import, monkeypatch):
    """JAX's GPU client takes 75% of the GPU at its first use unless XLA_PYTHON_CLIENT_PREALLOCATE
    says otherwise, and reads it when it starts: the plugin module (run in the kernel process)
    sets it before importing jax, and keeps a value the user set."""
    from conformance.peers import jax_xla
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    jax_xla.require_jax()
    assert jax_import == [("jax", "false"), ("jax.numpy", "false")]


def test_a_users_preallocation_setting_is_kept(jax_import, monkeypatch):
    from conformance.peers import jax_xla
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    jax_xla.require_jax()
    assert jax_import == [("jax", "true"), ("jax.numpy", "true")]


class _DeviceArray:
    """A CuPy array's address (`.data.ptr`) and `.copy()`, which allocates at an aligned one."""

    def __init__(self, ptr: int) -> None:
        self.data = types.SimpleNamespace(ptr=ptr)

    def copy(self):
        return _DeviceArray(0x7F0000100000)


def test_cpu_entries_run_on_jaxs_cpu_device_and_cuda_ones_through_dlpack():
    """A CUDA build of jaxlib puts an array on the GPU by default: the cpu entries place theirs
    on the CPU device, so `--device cpu` audits JAX's CPU backend on any machine."""
    from conformance.peers import jax_xla
    calls: list = []
    fake = types.SimpleNamespace(device_put=lambda a, d: calls.append(("put", a, d)) or "on-cpu",
                                 devices=lambda kind: [f"{kind}:0"],
                                 dlpack=types.SimpleNamespace(
                                     from_dlpack=lambda a: calls.append(("dlpack", a)) or "on-gpu"))
    x = np.ones(3, F32)
    assert jax_xla._to_jax(fake, x, Device.cpu) == "on-cpu"
    assert calls[0][0] == "put" and calls[0][1] is x and calls[0][2] == "cpu:0"
    aligned = _DeviceArray(0x7F0000000200)
    assert jax_xla._to_jax(fake, aligned, Device.cuda) == "on-gpu"
    assert calls[1] == ("dlpack", aligned)                   # no copy: JAX reads it in place


@pytest.mark.parametrize("offset", [4, 8, 12])
def test_a_view_xla_cannot_take_reaches_it_as_an_aligned_copy(offset):
    """XLA's GPU executables fail on an input that is not 16-byte aligned (INTERNAL: "Address of
    buffer 1 must be a multiple of 10", or SIGSEGV; JAX 0.11 on an H100): the harness's
    misaligned views go to JAX as aligned copies, as a JAX user's arrays always are."""
    from conformance.peers import jax_xla
    got: list = []
    fake = types.SimpleNamespace(dlpack=types.SimpleNamespace(from_dlpack=got.append))
    jax_xla._to_jax(fake, _DeviceArray(0x7F0000000200 + offset), Device.cuda)
    assert got[0].data.ptr % jax_xla.XLA_ALIGNMENT == 0 and got[0].data.ptr == 0x7F0000100000


def test_matmul_asks_for_float32_not_tf32():
    """On an Ampere or later GPU JAX's default precision computes a float32 dot in TF32: the
    entry asks for "highest" (float32), as PyTorch's peer turns TF32 off."""
    from conformance.peers import jax_xla
    calls: list = []
    fake = types.SimpleNamespace(numpy=_Recorder(calls), nn=_Recorder(calls))
    jax_xla.jax_functions(fake)[Op.matmul]("a", "b", trans_b=True)
    (name, args, kwargs), = [c for c in calls if c[0] == "matmul"]
    assert args == ("a", "swapaxes") and kwargs == {"precision": "highest"}
