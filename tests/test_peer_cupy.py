"""CuPy as an audited peer (conformance/peers/cupy_peer.py) under its own contract
(conformance/peers/cupy_contract.py), on the CPU with no CuPy: the plugin refuses with a named
error, builds its entries on a stand-in `cupy` module, and its contract's classification is
checked on stand-ins of CuPy's kernels with -ftz=true emulated (fixtures/plugins/
cupy_stand_ins.py) and on CuPy's own functions run on NumPy and SciPy: a convention (a flushed
subnormal, a zero tie's sign, clip's flushed comparison, a subnormal alpha, log_softmax's shift)
never counts as a failure, a contract violation (a NaN lost, expf past its documented 2 ulp, a
value no rule gives) always does, and accuracy CuPy does not document is listed with its figure.
The documented bounds are checked against CuPy 14.2's recorded exhaustive sweeps on an H200
(evidence/h200/exhaustive-cupy.*.json)."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance import evidence
from conformance.campaign import Settings, run_campaign
from conformance.fingerprint import fingerprint
from conformance.peers import accuracy as A
from conformance.peers import cupy_peer
from conformance.peers.contracts import PEER_PREFIXES, contract_for
from conformance.peers.cupy_contract import FTZ, contracts, with_conventions
from conformance.peers.rejudge import rejudge, rejudge_directory
from conformance.plugins import PluginEntry, PluginError, load_plugin
from conformance.trust import campaign_problem
from engine.registry import registry
from engine.types import BackendOp as Op, Device, Provider, Reduction, Subnormals, VJPMode
from fixtures.plugins.cupy_stand_ins import ENTRIES, PLAIN

REPO = Path(__file__).resolve().parent.parent
H200 = REPO / "evidence" / "h200"
SPEC = "conformance.peers.cupy_peer:ENTRIES"
HAVE_CUPY = importlib.util.find_spec("cupy") is not None
needs_no_cupy = pytest.mark.skipif(HAVE_CUPY, reason="cupy is installed here: the refusal "
                                                     "without it cannot be seen")


# --- the plugin without CuPy, and on a stand-in `cupy` module ------------------------------------

@needs_no_cupy
def test_plugin_without_cupy_names_what_to_install():
    with pytest.raises(PluginError) as exc:
        load_plugin(SPEC)
    text = str(exc.value)
    assert "cupy is not importable" in text and "pip install cupy-cuda13x" in text
    assert "factory raised" not in text     # the factory's own diagnosis, not wrapped


@needs_no_cupy
def test_cli_run_without_cupy_is_a_usage_error(capsys):
    from conformance.cli import main
    assert main(["run", "--plugin", SPEC, "--quick", "--no-progress"]) == 2
    assert "pip install cupy-cuda13x" in capsys.readouterr().err


@pytest.fixture
def fake_cupy(monkeypatch):
    """`cupy`, `cupyx` and `cupyx.scipy.special` as NumPy and SciPy (CuPy's API is theirs), with
    a device count the test sets; CUPY_TF32 unset."""
    import scipy.special
    cupy = types.ModuleType("cupy")
    cupy.__getattr__ = lambda name: getattr(np, name)
    cupy.__version__ = "14.2.0-stand-in"
    state = {"devices": 1}

    def count():
        if isinstance(state["devices"], Exception):
            raise state["devices"]
        return state["devices"]
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=count))
    cupyx = types.ModuleType("cupyx")
    cupyx.scatter_add = np.add.at
    cupyx.scipy = types.ModuleType("cupyx.scipy")
    cupyx.scipy.special = scipy.special
    for name, module in (("cupy", cupy), ("cupyx", cupyx), ("cupyx.scipy", cupyx.scipy),
                         ("cupyx.scipy.special", scipy.special)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.delenv(cupy_peer.TF32, raising=False)
    return state


def test_entries_one_per_op_named_apart_from_the_exhaustive_fixture(fake_cupy):
    from fixtures.plugins.cupy_ufuncs import ENTRIES as UFUNCS
    entries = load_plugin(SPEC)
    names = [e.capsule.name for e in entries]
    assert names == [f"cupy_peer.{op.label}" for op in cupy_peer.CUPY_OPS]
    assert not set(names) & {e.capsule.name for e in UFUNCS}     # one record per name
    assert all(n.startswith(PEER_PREFIXES) for n in names)
    capsules = registry().capsules()
    for e in entries:
        c, op = e.capsule, e.capsule.op
        ours = cupy_peer.our_capsule(op, Device.cuda, capsules)
        assert (c.provider, c.device, c.vjp_mode, e.vjp) == (Provider.external, Device.cuda,
                                                            VJPMode.none, None)
        assert c.value_contract.declared_bound == ours.value_contract.declared_bound
        pol, mine = c.numerical_policy, ours.numerical_policy
        assert pol.reduction not in (Reduction.fixed_left, Reduction.fixed_tree)
        assert (pol.rounding, pol.contraction) == (mine.rounding, mine.contraction)
        if op in cupy_peer.NVRTC_OPS and mine.subnormals is Subnormals.gradual_underflow:
            assert pol.subnormals is Subnormals.flush_to_zero, op    # -ftz=true
        else:
            assert pol.subnormals is mine.subnormals, op
        assert (e.declines is not None) == (op in (Op.softmax, Op.log_softmax))
    assert {e.capsule.op: e for e in entries}[Op.matmul].capsule.numerical_policy == \
        cupy_peer.our_capsule(Op.matmul, Device.cuda, capsules).numerical_policy   # cuBLAS


def _compiled_from(forward) -> str:
    """The file name of the function an entry's forward (cupy_peer.forward_of) calls."""
    cells = dict(zip(forward.__code__.co_freevars, forward.__closure__ or ()))
    return cells["fn"].cell_contents.__code__.co_filename


def test_entries_call_the_expression_tables_text(fake_cupy):
    """One source: the plugin's functions, on the stand-in `cupy` module and on PLAIN()'s NumPy
    and SciPy (the runs below), are compiled from conformance/peers/expressions.py's CUPY table,
    the text a reproducer's script copies; the table holds every op the plugin audits."""
    from conformance.peers import expressions as X
    assert {op.label for op in cupy_peer.CUPY_OPS} == set(X.CUPY.ops)
    for entries in (load_plugin(SPEC), PLAIN()):
        assert {e.capsule.name: _compiled_from(e.forward) for e in entries} == {
            f"cupy_peer.{op.label}": f"{X.__file__}::cupy.{op.label}"
            for op in cupy_peer.CUPY_OPS}
    assert X.PEERS["cupy_peer"] is X.CUPY and "cupy" not in X.PEERS
    assert X.CUPY.plugin == SPEC.split(":")[0]


def test_no_device_and_tf32_are_named_errors(fake_cupy, monkeypatch):
    fake_cupy["devices"] = 0
    with pytest.raises(PluginError, match="sees no CUDA device"):
        cupy_peer.ENTRIES()
    fake_cupy["devices"] = RuntimeError("cudaErrorNoDevice")
    with pytest.raises(PluginError, match="sees no CUDA device .cudaErrorNoDevice"):
        cupy_peer.ENTRIES()
    fake_cupy["devices"] = 1
    monkeypatch.setenv("CUPY_TF32", "1")
    with pytest.raises(PluginError, match="CUPY_TF32=1 lets cuBLAS compute it in TF32; unset"):
        cupy_peer.ENTRIES()
    for bad in ("", "no"):             # CuPy's own int() raises at the matmul
        monkeypatch.setenv("CUPY_TF32", bad)
        with pytest.raises(PluginError, match=f"CUPY_TF32={bad!r} is not an integer"):
            cupy_peer.ENTRIES()
    for off in ("0", " 0", "-1"):      # CuPy's reading: not a positive integer, no TF32
        monkeypatch.setenv("CUPY_TF32", off)
        assert len(cupy_peer.ENTRIES()) == len(cupy_peer.CUPY_OPS)


def test_declines_must_be_callable():
    entry = PLAIN()[0]
    with pytest.raises(PluginError, match="declines is a str, not callable or None"):
        from conformance.plugins import _entries
        _entries([PluginEntry(entry.capsule, entry.forward, declines="no")], "x:Y")


# --- the contract ------------------------------------------------------------------------------

def test_every_op_has_our_capsule_a_reference_and_a_contract():
    from conformance import references
    table = contracts()
    assert set(table) == {f"cupy_peer.{op.label}" for op in cupy_peer.CUPY_OPS}
    for op in cupy_peer.CUPY_OPS:
        assert cupy_peer.our_capsule(op, Device.cuda, registry().capsules()) is not None, op
        assert op.label in references.OPS
        c = table[f"cupy_peer.{op.label}"]
        assert c.peer == "CuPy" and c.semantics.startswith("https://docs.cupy.dev/")
        assert c.policy == ((FTZ,) if op in cupy_peer.NVRTC_OPS else ()), op
        assert contract_for(SPEC, f"cupy_peer.{op.label}") is c
    assert contract_for("fixtures.plugins.cupy_stand_ins:ENTRIES", "cupy_peer.max") is None
    assert sorted(with_conventions()) == ["cupy_peer.clamp", "cupy_peer.log_softmax",
                                          "cupy_peer.max", "cupy_peer.min", "cupy_peer.relu",
                                          "cupy_peer.scale"]
    assert all(not cl.documented for c in contracts().values()
               for cl in [v.clause for v in c.conventions] + [p.clause for p in c.policy])
    assert "cupy/cuda/compiler.py" in FTZ.clause.source


def test_documented_accuracy_is_the_cuda_guides_for_the_function_called():
    table = contracts()
    ulps = {op: table[f"cupy_peer.{op}"].accuracy.ulps for op in (
        "exp", "log", "safe_log", "sin", "cos", "tanh", "sqrt", "inv", "add", "mul", "scale",
        "max", "clamp", "sigmoid", "softplus", "softmax", "log_softmax", "reduce_sum",
        "reduce_mean", "mse_loss", "matmul", "scatter_add")}
    assert ulps == {"exp": 2.0, "log": 1.0, "safe_log": 1.0, "sin": 2.0, "cos": 2.0, "tanh": 2.0,
                    "sqrt": 0.0, "inv": 0.0, "add": 0.0, "mul": 0.0, "scale": 0.0, "max": 0.0,
                    "clamp": 0.0, "sigmoid": None, "softplus": None, "softmax": None,
                    "log_softmax": None, "reduce_sum": None, "reduce_mean": None,
                    "mse_loss": None, "matmul": None, "scatter_add": None}
    assert table["cupy_peer.exp"].accuracy.function == "expf"
    assert table["cupy_peer.exp"].accuracy.calls.startswith("cupy/cupy: cupy/_math/explog.py")


@pytest.mark.parametrize("op", ["exp", "log", "sin", "cos", "tanh", "sqrt"])
def test_documented_bounds_meet_cupys_recorded_exhaustive_sweeps(op):
    """CuPy 14.2's own ufuncs over all 2^32 float32 inputs on an H200 (fixtures/plugins/
    cupy_ufuncs.py): the worst error is within the bound the contract documents, so none of
    them is a defect; every subnormal result was flushed and none preserved (-ftz=true), and
    subnormal inputs were read as zero where that changed the result (log, sqrt)."""
    record = json.loads((H200 / f"exhaustive-cupy.{op}.json").read_text())
    fwd, bound = record["forward"], contracts()[f"cupy_peer.{op}"].accuracy.ulps
    assert record["status"] == "passed" and fwd["failed"] == 0
    assert fwd["max_ulps"] <= bound
    defect, _ = A.classes(np.array(["exceeds-bound"], dtype=object), np.array([1.0]),
                          np.array([1.0]), np.array([fwd["max_ulps"]]), bound)
    assert not defect[0]
    assert fwd["subnormals_preserved"] == 0
    assert fwd["subnormal_inputs_failed"] == 0
    if op in ("log", "sqrt"):
        assert fwd["inputs_flushed"] == fwd["subnormal_inputs"] > 0


# --- the classification, on stand-ins of CuPy's kernels ----------------------------------------

def _entry(name, entries=ENTRIES):
    return next(e for e in entries() if e.capsule.name == name)


def _campaign(entry, contract):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_campaign(entry.capsule, entry.handler(), Settings.for_run(None, 0, True),
                            contract=contract)


def _contract(entry):
    return contracts()[f"cupy_peer.{entry.capsule.op.label}"]


def _record(entry, campaign, plugin="fixtures.plugins.cupy_stand_ins:ENTRIES"):
    return evidence.make_record(entry.capsule, campaign,
                                fingerprint(entry.capsule, entry.handler()), "cpu", plugin)


def _clauses(rec) -> dict:
    return {k: v["elements"] for k, v in (rec.get("differences") or {}).get("clauses", {}).items()}


@pytest.mark.parametrize("name, clause", [
    ("cupy_peer.max", "zero-tie-either-sign"),             # fmaxf's zero tie
    ("cupy_peer.clamp", "clip-compares-flushed"),          # clip(-1e-40, 0, hi) = -1e-40
    ("cupy_peer.scale", "subnormal-scalar-read-as-zero"),  # alpha = 1e-40 read as 0
])
def test_a_cupy_convention_is_a_difference_not_a_failure(name, clause):
    entry = _entry(name)
    ours = _campaign(entry, None)
    assert ours["status"] == "failed" and "differences" not in ours
    peer = _campaign(entry, _contract(entry))
    assert peer["status"] == "passed", peer["failure_reasons"]
    assert set(_clauses(peer)) == {clause} and _clauses(peer)[clause] > 0
    assert peer["differences"]["peer"] == "CuPy"
    assert peer["differences"]["clauses"][clause]["class"] == "undocumented"
    why = campaign_problem(_record(entry, peer), entry.capsule, entry.handler())
    assert why.startswith(f"meets CuPy's own contract but differs from TorchLean's: {clause} x")


def test_a_flushed_subnormal_under_the_ftz_policy_is_a_convention_not_a_failure():
    """expit under -ftz=true flushes subnormal results (sigmoid(-100)): the entries' policy says
    subnormal=flush-to-zero, so the judge admits them and counts them; the same kernel declared
    under our policy (gradual underflow) fails with flushed-subnormal, a defect (no digit)."""
    entry = _entry("cupy_peer.sigmoid")
    assert entry.capsule.numerical_policy.subnormals is Subnormals.flush_to_zero
    rec = _campaign(entry, _contract(entry))
    assert rec["status"] == "passed", rec["failure_reasons"]
    assert rec["observed"]["subnormals_flushed"] > 0
    record = _record(entry, rec)
    assert FTZ.count(record) == rec["observed"]["subnormals_flushed"] + \
        rec["observed"].get("inputs_flushed", 0)
    ours = registry().get("reference.sigmoid")[0].numerical_policy
    gradual = dataclasses.replace(entry, capsule=dataclasses.replace(
        entry.capsule, numerical_policy=ours))
    failed = _campaign(gradual, _contract(entry))
    assert failed["status"] == "failed" and set(failed["failure_reasons"]) == {"flushed-subnormal"}
    assert FTZ.count(_record(gradual, failed)) == 0      # not judged under the ftz policy


@pytest.mark.parametrize("name, reason", [
    ("user.max_fmax", "nan-mismatch"),      # CuPy documents NaN propagation: a NaN lost
    ("user.max_tie_one", "not-bitwise"),    # 1.0 at a zero tie: neither zero
    ("user.exp_4ulp", "exceeds-bound"),     # past expf's documented 2 ulp (and its margin)
])
def test_a_violation_of_cupys_own_contract_always_fails(name, reason):
    entry = _entry(name)
    rec = _campaign(entry, _contract(entry))
    assert rec["status"] == "failed" and set(rec["failure_reasons"]) == {reason}
    assert rec["differences"]["undocumented_accuracy"] == {}


@pytest.mark.parametrize("name, ulps", [("user.exp_2ulp", 2.0), ("user.softmax_3ulp", None)])
def test_accuracy_cupy_does_not_break_is_listed_not_failed(name, ulps):
    """exp two ulps up meets expf's documented 2 ulp; softmax three up: CuPy documents none."""
    entry = _entry(name)
    assert _campaign(entry, None)["status"] == "failed"
    rec = _campaign(entry, _contract(entry))
    assert rec["status"] == "passed", rec["failure_reasons"]
    figure = rec["differences"]["undocumented_accuracy"]["value"]
    assert figure["elements"] > 0 and figure["worst_ratio"] > 1
    assert rec["differences"]["accuracy"]["ulps"] == ulps
    why = campaign_problem(_record(entry, rec), entry.capsule, entry.handler())
    assert why.startswith("meets CuPy's own contract but differs from TorchLean's: "
                          "undocumented accuracy (value) x"), why


# --- CuPy's own functions, on NumPy and SciPy ----------------------------------------------------

@pytest.mark.parametrize("op", ["scale", "clamp", "relu", "softmax", "reduce_sum", "reduce_mean",
                                "mse_loss", "matmul", "permute", "broadcast", "concat", "slice",
                                "gather", "scatter_add"])
def test_cupys_functions_on_numpy_pass_under_cupys_contract(op):
    """The plugin's own functions (cupy_functions) with NumPy and SciPy for CuPy: each op's
    parameters reach them as docs/OPS.md states (axes, keepdims, perm, indices, trans flags)."""
    entry = _entry(f"cupy_peer.{op}", PLAIN)
    rec = _campaign(entry, _contract(entry))
    assert rec["status"] == "passed", rec["failure_reasons"]
    if op == "softmax":      # a zero-length axis: CuPy's amax raises; declined, and said why
        assert rec["cases"]["skipped"] > 0
        assert any("zero-length axis" in n for n in rec["cases"]["skipped_notes"])


def test_cupys_log_softmax_keeps_scipys_shift_and_loses_a_cancelled_digit():
    """SciPy's formula (CuPy's): a row with +inf is -inf elsewhere, CuPy's rule; x - log(sum)
    rounding a tiny result to 0 keeps no digit: a defect, as PyTorch's recorded one is."""
    entry = _entry("cupy_peer.log_softmax", PLAIN)
    rec = _campaign(entry, _contract(entry))
    assert _clauses(rec).get("shift-zero-at-nonfinite-max", 0) > 0
    assert set(rec["failure_reasons"]) <= {"exceeds-bound"}
    for ce in rec["counterexamples"]:
        for f in ce["failures"]:
            assert A.relative_error(f["got_value"], f["exact"]) >= 1


# --- recorded evidence: classify-peers and the report ------------------------------------------

def _write(directory: Path, entry, contract, name):
    """A record of `entry` as the peer module's would be (plugin spec SPEC), with its replays."""
    from conformance.worker import shrinker
    settings = Settings.for_run(None, 0, True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        campaign = run_campaign(entry.capsule, entry.handler(), settings, contract=contract,
                                shrink_to=shrinker(entry.capsule, entry.handler(), settings,
                                                   directory, SPEC, "cpu", contract))
    record = _record(entry, campaign, SPEC)
    (directory / f"{name}.json").write_text(json.dumps(record))
    return record


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """max judged by TorchLean's contract alone (an older record), sigmoid under CuPy's."""
    d = tmp_path_factory.mktemp("cupy-evidence")
    _write(d, _entry("cupy_peer.max"), None, "cupy_peer.max")
    sigmoid = _entry("cupy_peer.sigmoid")
    _write(d, sigmoid, _contract(sigmoid), "cupy_peer.sigmoid")
    return d


def test_rejudging_a_recorded_zero_tie_finds_cupys_convention(recorded):
    record = json.loads((recorded / "cupy_peer.max.json").read_text())
    assert record["status"] == "failed"
    judged = rejudge(record, recorded)
    assert judged.peer == "CuPy" and judged.status != "failed"
    assert {r.cls for r in judged.reasons} == {A.CONVENTION}
    assert judged.policy == {"ftz-subnormals": FTZ.count(record)} and FTZ.count(record) > 0


def test_classify_peers_lists_cupys_records_and_its_policy(recorded, capsys):
    from conformance.cli import main
    assert {j.capsule for j in rejudge_directory(recorded)} == {"cupy_peer.max",
                                                                 "cupy_peer.sigmoid"}
    assert main(["classify-peers", str(recorded)]) == 0
    out = capsys.readouterr().out
    assert "cupy_peer.max: failed -> " in out and "cupy_peer.sigmoid: passed -> passed" in out
    assert "ftz-subnormals:" in out and "admitted by CuPy's policy (observed)" in out


def test_the_report_renders_cupys_contract_table(recorded, tmp_path):
    from reports.builder import build_report
    from reports.current import RegistryBuild
    from reports.peers import build_peers
    from reports.render import render_report
    page = build_peers(build_report([recorded], RegistryBuild()))
    (table,) = page.sections[0].contracts
    rows = {r.capsule: r for r in table.rows}
    assert table.peer == "CuPy" and set(rows) == {"cupy_peer.max", "cupy_peer.sigmoid"}
    assert ("zero-tie-either-sign", "undocumented", rows["cupy_peer.max"].conventions[0][2]) == \
        rows["cupy_peer.max"].conventions[0]
    assert ("ftz-subnormals", "undocumented, policy") == rows["cupy_peer.sigmoid"].conventions[0][:2]
    assert any(k["reason"] == "ftz-subnormals" and k["elements"] > 0
               for k in rows["cupy_peer.sigmoid"].kept)
    assert rows["cupy_peer.sigmoid"].accuracy == "undocumented"
    index = render_report([str(recorded)], str(tmp_path / "out"))
    peers = (Path(index).parent / "peers.html").read_text()
    assert "conformance.peers.cupy_peer:ENTRIES" in peers
    assert 'href="peer-cupy.html#peer-' in peers            # CuPy's contract has a page of its own
    html = (Path(index).parent / "peer-cupy.html").read_text()
    assert "CuPy&#39;s own contract, op by op" in html or "CuPy's own contract, op by op" in html
    flat = html.replace("<wbr>", "")
    assert "ftz-subnormals" in flat and "zero-tie-either-sign" in flat


# --- on a GPU, with CuPy --------------------------------------------------------------------------

def _cuda_inputs(cp, rng, op):
    """Small well-scaled inputs and the op's parameters (docs/OPS.md)."""
    n = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    unary = {Op.abs: {}, Op.relu: {}, Op.sigmoid: {}, Op.tanh: {}, Op.softplus: {}, Op.exp: {},
             Op.sin: {}, Op.cos: {}, Op.clamp: {"lo": -0.5, "hi": 0.5}, Op.scale: {"alpha": 1.5},
             Op.softmax: {"axis": -1}, Op.log_softmax: {"axis": 0},
             Op.reduce_sum: {"axes": (1, -2), "keepdims": True},
             Op.reduce_mean: {"axes": None, "keepdims": False},
             Op.reshape: {"shape": (8, 6)}, Op.permute: {"perm": (1, 0)},
             Op.broadcast: {"shape": (3, 6, 8)}, Op.slice: {"axis": -1, "start": 2, "stop": 5},
             Op.gather: {"axis": 1, "indices": np.array([0, 7, 7, 2])}}
    if op in unary:
        return (n(6, 8),), unary[op]
    if op in (Op.sqrt, Op.log, Op.inv, Op.safe_log):
        return (np.abs(n(6, 8)) + np.float32(0.1),), {}
    if op in (Op.add, Op.sub, Op.mul, Op.max, Op.min, Op.mse_loss):
        return (n(6, 8), n(6, 8)), {}
    if op is Op.concat:
        return (n(2, 8), n(3, 8)), {"axis": 0}
    if op is Op.scatter_add:
        return (n(6, 8), n(6, 3)), {"axis": 1, "indices": np.array([1, 1, 5])}
    if op is Op.matmul:
        return (n(5, 4), n(6, 4)), {"trans_b": True}
    raise AssertionError(f"no test input for {op.label}")


@pytest.mark.cuda
@pytest.mark.parametrize("op", cupy_peer.CUPY_OPS, ids=lambda op: op.label)
def test_entry_forward_is_cupys_kernel_of_the_op(op):
    """Each entry, on CuPy arrays, agrees with our reference of the op to float32 accuracy (1e-5
    relative to the largest magnitude: small well-scaled inputs), returns a fresh float32 array
    of the output's shape, and leaves its inputs as they were."""
    try:
        cp, _, _ = cupy_peer.require_cupy()
    except PluginError as exc:
        pytest.skip(str(exc))
    entry = {e.capsule.op: e for e in load_plugin(SPEC)}[op]
    host, params = _cuda_inputs(cp, np.random.default_rng(list(Op).index(op)), op)
    arrays = [cp.asarray(a) for a in host]
    out = entry.forward(*arrays, **params)
    want = np.asarray(registry().get(f"reference.{op.label}")[1].forward(*host, **params))
    got = cp.asnumpy(out)
    assert isinstance(out, cp.ndarray) and out.dtype == np.float32 and got.shape == want.shape
    assert np.allclose(got, want, rtol=0, atol=1e-5 * max(1.0, float(np.abs(want).max()))), op
    assert all(not cp.may_share_memory(out, a) for a in arrays)
    assert all(np.array_equal(cp.asnumpy(a), h) for a, h in zip(arrays, host))
