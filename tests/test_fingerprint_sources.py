"""A capsule's build fingerprint covers every kernel it runs (issue 16): the .cu files of its
forward and its VJP (native_cuda.broadcast's VJP sums with reduce.cu's kernels), the shared
header, the loader's compile options and the Python that launches the kernels; and evidence made
for an older fingerprint is judged stale by every reader: the resume check
(conformance/evidence.py), earned trust (conformance/trust.py) and the report
(reports/trust_view.py). Kernel sources are edited in a copy of engine/csrc/cuda/, never in place.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from conformance import evidence, fingerprint, trust
from conformance.campaign import Settings
from engine.native_sources import SOURCES
from engine.registry import registry
from engine.runtime import loader
from engine.types import BackendOp as Op
from reports.current import RegistryBuild
from reports.trust_view import freshness

GPU = "NVIDIA H200"


class BuildOnThisGpu(RegistryBuild):
    """The report's view of this checkout, as on the GPU the record names (a CUDA fingerprint is
    recomputed only there; the fingerprint itself needs no GPU)."""

    def _gpu_here(self):
        return GPU


@pytest.fixture
def sources(tmp_path, monkeypatch):
    """A copy of engine/csrc/cuda/ that the loader (and so every fingerprint) reads."""
    copy = tmp_path / "cuda"
    shutil.copytree(loader.CSRC_DIR, copy)
    monkeypatch.setattr(loader, "CSRC_DIR", copy)
    return copy


def _edit(path, line="// an edit that changes no kernel\n"):
    path.write_text(path.read_text() + "\n" + line)


def _fp(name: str) -> dict:
    cap, handler = registry().get(name)
    return fingerprint.fingerprint(cap, handler)


def _record(name: str, fp: dict) -> dict:
    """A passing campaign record of `name` made for the build fingerprint `fp`."""
    from conformance import generators
    cap, _ = registry().get(name)
    by_class = {c: {"run": 2, "failed": 0, "skipped": 0, "harness_errors": 0}
                for c in generators.classes_for(cap.op)}
    campaign = {"status": "passed", "settings": Settings.for_run(None, 0, True).to_json(),
                "cases": {"total": 2 * len(by_class), "failed": 0, "skipped": 0,
                          "by_class": by_class},
                "vjp_checked": True, "identity": {"failed": 0}}
    rec = evidence.make_record(cap, campaign, fp, "cuda")
    rec["environment"]["gpu"] = GPU
    return rec


def _judgements(rec: dict, path) -> dict:
    """What each reader makes of a record against the build as it is now."""
    name = rec["capsule"]["name"]
    cap, handler = registry().get(name)
    now = fingerprint.fingerprint(cap, handler)
    return {"resumable": evidence.resumable(path, now, rec["settings"], None) is not None,
            "trust": trust.campaign_problem(rec, cap, handler),
            "report": freshness(rec, BuildOnThisGpu(), None).state}


FRESH = {"resumable": True, "trust": None, "report": "fresh"}
STALE = {"resumable": False, "trust": "stale: the evidence was made for another build fingerprint",
         "report": "stale"}


def test_editing_a_vjp_kernel_makes_the_evidence_stale(sources, tmp_path):
    name = "native_cuda.broadcast"
    forward_file, vjp_files = SOURCES[Op.broadcast].file, fingerprint.cuda_files(
        registry().get(name)[0])
    assert forward_file == "shape.cu" and "reduce.cu" in vjp_files   # the VJP's kernels
    before = _fp(name)
    assert "engine/csrc/cuda/reduce.cu" in before["inputs"]
    rec = _record(name, before)
    path = evidence.record_path(tmp_path / "evidence", name)
    path.parent.mkdir()
    path.write_text(json.dumps(rec))
    assert _judgements(rec, path) == FRESH

    _edit(sources / "reduce.cu")
    after = _fp(name)
    assert after["value"] != before["value"]
    assert _judgements(rec, path) == STALE


def test_a_kernel_the_capsule_does_not_run_leaves_it_unchanged(sources, tmp_path):
    name = "native_cuda.broadcast"
    before = _fp(name)
    unused = sorted(set(loader.source_files()) - set(fingerprint.cuda_files(
        registry().get(name)[0])))
    assert "softmax.cu" in unused and "elementwise.cu" in unused
    for file in unused:
        _edit(sources / file)
    assert _fp(name)["value"] == before["value"]
    rec = _record(name, before)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(rec))
    assert _judgements(rec, path) == FRESH


def test_the_shared_header_is_part_of_every_kernel_fingerprint(sources):
    names = ("native_cuda.broadcast", "native_cuda.add", "native_cuda.softmax")
    before = {n: _fp(n)["value"] for n in names}
    _edit(sources / "tl_common.cuh")
    assert all(_fp(n)["value"] != before[n] for n in names)


def test_the_loader_options_are_part_of_the_fingerprint(monkeypatch):
    name = "native_cuda.broadcast"
    before = _fp(name)
    rec = _record(name, before)
    cap, handler = registry().get(name)
    monkeypatch.setattr(loader, "OPTIONS", tuple(o for o in loader.OPTIONS
                                                 if o != "--ftz=false") + ("--ftz=true",))
    assert _fp(name)["value"] != before["value"]
    assert trust.campaign_problem(rec, cap, handler) == STALE["trust"]
    assert freshness(rec, BuildOnThisGpu(), None).state == "stale"


def test_the_python_launching_each_kernel_is_hashed():
    """The modules that launch reduce.cu (the broadcast VJP's sums) and the launch plumbing are
    inputs of native_cuda.broadcast; a CPU capsule hashes none of them."""
    launchers = fingerprint.kernel_launchers(["reduce.cu"])
    assert launchers[:2] == ["engine/providers/native_cuda/launch.py",
                             "engine/runtime/driver_launch.py"]
    assert any("reduce.cu" in fingerprint._named_kernel_files()[m] for m in launchers[2:])
    inputs = _fp("native_cuda.broadcast")["inputs"]
    hashed = set(inputs) | {m.replace(".", "/") + ".py" for m in inputs}
    assert set(launchers) <= hashed
    assert not fingerprint.kernel_launchers([])
    assert not any(i.startswith("engine/") for i in _fp("reference.broadcast")["inputs"])


def test_cublas_linear_covers_the_bias_broadcast_kernel(sources):
    """cublas.linear broadcasts its bias with shape.cu before cuBLAS adds the product."""
    name = "cublas.linear"
    before = _fp(name)
    assert "engine/csrc/cuda/shape.cu" in before["inputs"]
    _edit(sources / "reduce.cu")
    assert _fp(name)["value"] == before["value"]
    _edit(sources / "shape.cu")
    assert _fp(name)["value"] != before["value"]


# --- on a GPU: what each capsule really launches --------------------------------------------------

@pytest.mark.cuda
def test_every_kernel_a_cuda_capsule_launches_lies_in_a_file_its_fingerprint_hashes(monkeypatch):
    """Run every CUDA capsule's forward and VJP on a few cases of each generator class, in both
    reduction modes, recording the .cu file of every kernel launched: each must be one its build
    fingerprint hashes (the source map in engine/native_sources.py is what decides that)."""
    from conformance import generators
    from conformance.kernel_call import KernelRaised, call_forward, call_vjp
    from conformance.vjp import vjp_callable
    from engine.providers.native_cuda import launch
    from engine.runtime.deterministic import set_deterministic_reductions
    from engine.types import Device

    launched: set[str] = set()

    def spying(real):   # both launch paths: CuPy's (__call__) and the prepared one (launch)
        def spy(self, *args, **kwargs):
            launched.add(self.file)
            return real(self, *args, **kwargs)
        return spy

    monkeypatch.setattr(launch.Kernel, "__call__", spying(launch.Kernel.__call__))
    monkeypatch.setattr(launch.Kernel, "launch", spying(launch.Kernel.launch))
    reg = registry()
    problems, ran = [], 0
    for cap in reg.capsules():
        handler = reg.handler(cap.name)
        if cap.device is not Device.cuda or (handler.unavailable and handler.unavailable()):
            continue
        launched.clear()
        vjp_fn = vjp_callable(cap, handler)
        previous = set_deterministic_reductions(False)
        try:
            for deterministic in (False, True):
                set_deterministic_reductions(deterministic)
                for cls in generators.classes_for(cap.op):
                    for index in range(2):
                        case = generators.draw_case(cap.op, 0, cls, index)
                        if handler.declines and handler.declines(case.inputs, case.params):
                            continue
                        try:
                            out, _ = call_forward(handler, Device.cuda, case.inputs, case.params,
                                                  poison=False)
                            if vjp_fn is not None:
                                g = generators.cotangent_for(cap.op, 0, cls, index,
                                                             np.shape(out))
                                call_vjp(vjp_fn, Device.cuda, case.inputs, np.asarray(out), g,
                                         case.params, poison=False)
                        except KernelRaised:
                            continue
                        ran += 1
        finally:
            set_deterministic_reductions(previous)
        hashed = set(fingerprint.cuda_files(cap))
        if launched - hashed:
            problems.append(f"{cap.name} launched kernels of {sorted(launched - hashed)}, which "
                            f"its fingerprint does not hash (it hashes {sorted(hashed)})")
    assert ran, "no CUDA capsule ran a case"
    assert not problems, "\n".join(problems)
