"""Ops the engine does not have (docs/PLUGINS.md, "Ops the engine does not have"): a plugin's
capsules of RMSNorm, SwiGLU and rotary embedding (fixtures/plugins/user_ops.py) audited against the
user's contract (fixtures/plugins/user_ops_contract.py: records, mpmath references, derived
bounds), which the judge imports while the kernel module runs only in kernel processes. The honest
kernels pass, the buggy ones fail, through the same campaign as a built-in op's."""
import re
import shutil
import sys
from pathlib import Path
import warnings

import numpy as np
import pytest

from conformance import families, generators
from conformance.families.spec import OpSpec
from conformance.plugins import PluginError, UserOp
from engine.types import BackendOp as Op

CONTRACT = "fixtures.plugins.user_ops_contract:CONTRACTS"
PLUGIN = "fixtures.plugins.user_ops:ENTRIES"


@pytest.fixture
def contracts(monkeypatch):
    """The user's records registered for one test, the registry as it was after it."""
    specs, op_specs = families.SPECS, dict(families.OP_SPECS)
    tables = [dict(t) for t in (families.FORWARD_RULES, families.VJP_RULES,
                                families.CAPSULE_FORWARD_RULES, families.CAPSULE_VJP_RULES)]
    files = list(families._CONTRACT_FILES)
    monkeypatch.setenv(families.CONTRACTS_ENV, CONTRACT)   # for the workers a run starts
    loaded = families.load_contracts(CONTRACT)
    yield {s.op.label: s for s in loaded}
    families.SPECS = specs
    for table, saved in zip((families.OP_SPECS, families.FORWARD_RULES, families.VJP_RULES,
                             families.CAPSULE_FORWARD_RULES, families.CAPSULE_VJP_RULES),
                            [op_specs] + tables):
        table.clear()
        table.update(saved)
    families._CONTRACT_FILES[:] = files
    generators.edge_set.cache_clear()


def test_a_user_op_is_a_new_name():
    assert UserOp("rmsnorm") == UserOp("rmsnorm") and UserOp("rmsnorm").needs_vjp
    with pytest.raises(PluginError, match="takes the name of the engine's op `softmax`"):
        UserOp("softmax")
    with pytest.raises(PluginError, match="is not a name"):
        UserOp("RMS Norm")


def test_a_user_op_crosses_from_the_kernel_process_as_data():
    from conformance.isolation.capsule_codec import capsule_from_data, to_data
    from fixtures.plugins.user_ops_contract import RMSNORM
    from engine.capsule import standard_capsule
    from engine.types import (Contraction, Device, NumericalPolicy, Provider, Reduction,
                              Rounding, Subnormals, TrustLevel, VJPMode)
    policy = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                             Contraction.implementation_defined, Reduction.implementation_defined)
    cap = standard_capsule(RMSNORM, Provider.external, Device.cpu, trust=TrustLevel.fuzzed,
                           vjp_mode=VJPMode.backend_vjp, policy=policy, source_file="x.py",
                           name="user.rmsnorm")
    assert capsule_from_data(to_data(cap)) == cap
    data = to_data(cap)
    data["fields"]["op"]["fields"]["label"] = "softmax"    # a kernel process that lies
    from conformance.isolation.capsule_codec import CapsuleDataError
    with pytest.raises(CapsuleDataError, match="takes the name of the engine's op"):
        capsule_from_data(data)


def test_the_catalogue_takes_only_complete_records_of_user_ops(contracts):
    rms = contracts["rmsnorm"]
    assert families.OP_SPECS[rms.op] is rms and families.SPECS[-3:] == tuple(contracts.values())
    assert families.rule_for(rms.op) is rms.forward_rule
    from conformance import references
    assert references.known("rmsnorm") and references.get("rmsnorm") is rms.reference
    with pytest.raises(families.ContractError, match="already has a record"):
        families.register(OpSpec(UserOp("rmsnorm"), rms.layout, rms.edges,
                                 reference=rms.reference))
    with pytest.raises(families.ContractError, match="the engine's own"):
        families.register(families.OP_SPECS[Op.abs])
    with pytest.raises(families.ContractError, match="names no reference of its own"):
        families.register(OpSpec(UserOp("other"), rms.layout, rms.edges))


def test_the_contract_joins_the_harness_digest(contracts):
    from conformance.fingerprint import _conformance_digest, harness_digest
    assert families.contract_files() and harness_digest() != _conformance_digest()


def test_the_records_references_agree_with_their_own_vjps(contracts):
    """<g, J u> from central differences of the mpmath forward against <VJP(g), u>: the
    references are consistent (what the campaign's identity check relies on)."""
    rng = np.random.default_rng(3)
    for label, spec in contracts.items():
        shapes, params = spec.layout(rng, "normal")
        xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        ref = spec.reference
        out = ref.forward(xs, **params).exact
        g = rng.standard_normal(out.shape)
        grads = ref.vjp(xs, g.astype(np.float32), **params)
        for i, x in enumerate(xs):
            u = rng.standard_normal(x.shape)
            h = 2.0 ** -8
            plus = [a.astype(np.float64) for a in xs]
            minus = [a.astype(np.float64) for a in xs]
            plus[i] = plus[i] + h * u
            minus[i] = minus[i] - h * u
            # the references take float32 inputs: evaluate the directional derivative in float64
            # through the references' float64 formula on the IEEE path instead
            fd = _float64_forward(label, plus, params) - _float64_forward(label, minus, params)
            lhs = float(np.sum(g.astype(np.float32).astype(np.float64) * fd) / (2 * h))
            rhs = float(np.sum(grads[i].exact * u))
            assert lhs == pytest.approx(rhs, rel=1e-3, abs=1e-6), (label, i)


def _float64_forward(label, xs, params):
    if label == "rmsnorm":
        x, w = xs
        r = 1 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + params["eps"])
        return x * r * w
    if label == "swiglu":
        a, b = xs
        return a / (1 + np.exp(-a)) * b
    (x,) = xs
    tokens, d = x.shape
    theta = params["base"] ** (-2.0 * np.arange(d // 2) / d)
    ang = np.arange(tokens)[:, None] * theta[None, :]
    out = np.empty_like(x)
    out[:, 0::2] = x[:, 0::2] * np.cos(ang) - x[:, 1::2] * np.sin(ang)
    out[:, 1::2] = x[:, 0::2] * np.sin(ang) + x[:, 1::2] * np.cos(ang)
    return out


@pytest.mark.parametrize("name, passes", [
    ("user.rmsnorm", True), ("user.rmsnorm_no_eps", False), ("user.swiglu", True),
    ("user.swiglu_short_vjp", False), ("user.rotary", True),
    ("user.rotary_float32_angles", False)])
def test_honest_kernels_pass_and_buggy_ones_fail(contracts, name, passes):
    from conformance.campaign import Settings, run_campaign
    from fixtures.plugins.user_ops import ENTRIES
    entry = next(e for e in ENTRIES if e.capsule.name == name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        record = run_campaign(entry.capsule, entry.handler(), Settings.for_run(2, 1, True))
    assert (record["status"] == "passed") is passes, record["failure_reasons"]
    assert record["vjp_checked"] and record["cases"]["by_class"]["edges"]["run"] > 0
    if passes:
        assert record["identity"]["passed"] == 1


def test_the_judge_runs_the_plugin_in_kernel_processes_with_the_contract(contracts, tmp_path):
    """run_targets here (the judge's main process: selection, descriptions, records) with the
    kernel module refused: its capsules are described by kernel processes and judged by workers
    that load the contract, as `run --plugin ... --op-contracts ...` does."""
    from conformance.campaign import Settings
    from conformance.runner import Target, run_targets

    class RefuseKernelModule:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "fixtures.plugins.user_ops":
                raise ImportError("the judge imported the kernel module")
            return None
    saved = sys.modules.pop("fixtures.plugins.user_ops", None)
    sys.meta_path.insert(0, RefuseKernelModule)
    try:
        quick = Settings.for_run(None, 0, True).to_json()
        targets = [Target(n, PLUGIN) for n in ("user.swiglu", "user.swiglu_short_vjp")]
        records = run_targets(targets, quick, tmp_path, "cpu", jobs=2, timeout_s=600)
    finally:
        sys.meta_path.remove(RefuseKernelModule)
        if saved is not None:
            sys.modules["fixtures.plugins.user_ops"] = saved
    assert [r["status"] for r in records] == ["passed", "failed"]
    assert records[0]["capsule"]["op"] == "swiglu" and records[0]["plugin"]
    assert set(records[1]["failure_reasons"]) >= {"vjp-exceeds-bound"}
    assert "fixtures.plugins.user_ops_contract" in sys.modules


def _cli(*args, timeout=600):
    import subprocess
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=Path(__file__).resolve().parent.parent)


def test_a_user_runs_and_replays_a_user_op_from_the_command_line(tmp_path):
    """What docs/PLUGINS.md tells a user to type: the run fails (exit 1) on the planted bug, prints
    the replay command of its counterexample, and that command reproduces it (exit 1, "still
    failing"); without --op-contracts the replay is a usage error that says what to add."""
    run = _cli("run", "--plugin", PLUGIN, "--op-contracts", CONTRACT, "--quick", "--no-progress",
               "--evidence-dir", str(tmp_path), "--capsule", "user.rmsnorm",
               "user.rmsnorm_no_eps", "--jobs", "2", "--seed", "7")   # a plugin's seed is random
    assert run.returncode == 1, run.stdout + run.stderr
    assert re.search(r"user\.rmsnorm\s+\d+.*passed", run.stdout), run.stdout
    replay = re.search(r"replay: (torchlean-conformance replay .+\.json)", run.stdout)
    assert replay and "--op-contracts " + CONTRACT in replay.group(1), run.stdout
    args = replay.group(1).split()[1:]
    again = _cli(*args)
    assert again.returncode == 1 and "still failing" in again.stdout, again.stdout + again.stderr
    without = _cli("replay", "--plugin", PLUGIN, args[-1])
    assert without.returncode == 2 and "--op-contracts" in without.stderr, without.stderr


NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: the compile check needs the CUDA "
                                         "toolkit")
def test_the_cuda_kernels_compile_under_the_loaders_options(tmp_path):
    import subprocess
    from engine.runtime import loader
    from fixtures.plugins.user_ops_cuda import ENTRIES, SOURCE
    out = tmp_path / "user_ops.ptx"
    cmd = [NVCC, *loader.OPTIONS, "-arch=sm_90", "--ptx", "-o", str(out), str(SOURCE)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    exported = set(re.findall(r"\.visible \.entry (\w+)\(", out.read_text()))
    assert {e.capsule.value_contract.provenance.native_symbol for e in ENTRIES} <= exported
    assert {"user_rms_rstd", "user_rms_forward", "user_rms_dx", "user_rms_dw", "user_swiglu",
            "user_swiglu_vjp", "user_rotary"} == exported


@pytest.mark.cuda
def test_on_cuda_honest_kernels_pass_and_buggy_ones_fail_for_their_reason(tmp_path):
    run = _cli("run", "--device", "cuda", "--plugin", "fixtures.plugins.user_ops_cuda:ENTRIES",
               "--op-contracts", CONTRACT, "--quick", "--no-progress", "--evidence-dir",
               str(tmp_path), "--jobs", "3", "--seed", "7")   # the CPU tests' seed, not a random one
    assert run.returncode == 1, run.stdout + run.stderr
    import json
    records = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("user_cuda.*.json")}
    status = {name: r["status"] for name, r in records.items()}
    assert status == {"user_cuda.rmsnorm": "passed", "user_cuda.rmsnorm_no_eps": "failed",
                      "user_cuda.swiglu": "passed", "user_cuda.swiglu_short_vjp": "failed",
                      "user_cuda.rotary": "passed",
                      "user_cuda.rotary_float32_angles": "failed"}, run.stdout
    reasons = {name: set(r["failure_reasons"]) for name, r in records.items()}
    assert "exceeds-bound" in reasons["user_cuda.rmsnorm_no_eps"]
    assert reasons["user_cuda.swiglu_short_vjp"] <= {"vjp-exceeds-bound", "vjp-nan-mismatch"}
    assert "vjp-exceeds-bound" in reasons["user_cuda.swiglu_short_vjp"]
    assert "exceeds-bound" in reasons["user_cuda.rotary_float32_angles"]
    assert all(r["vjp_checked"] for r in records.values())


@pytest.mark.parametrize("seed", [17, 19, 20, 22, 27, 38])
def test_the_honest_rmsnorm_vjp_passes_the_wide_cases_that_once_failed(contracts, seed):
    """Seeds whose wide-range cases failed the honest RMSNorm VJP before its bound counted a
    subnormal xhat multiplied by c and r (x = -3.7e-34, r = 1.6e-7, c = 8.3e16: dx off by 110
    ulps of its 7.6e-31, from xhat's 2^-150)."""
    from conformance.campaign import Settings, run_campaign
    from fixtures.plugins.user_ops import ENTRIES
    entry = next(e for e in ENTRIES if e.capsule.name == "user.rmsnorm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        record = run_campaign(entry.capsule, entry.handler(), Settings.for_run(None, seed, True),
                              only=("wide",))
    assert record["status"] == "passed", (record["failure_reasons"],
                                          record["counterexamples"][:1])
    assert record["vjp_checked"] and record["cases"]["total"] > 0
