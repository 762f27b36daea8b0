"""PyTorch's 16-bit kernels under the 16-bit audit (conformance/peers/torch_lowp.py). Without
torch: the plugin names what to install, and its table of unary functions is the references'.
With a CPU torch (not a dependency of the project: these are skipped without it): bits cross to
PyTorch and back unchanged, and the audit's verdicts on PyTorch's CPU kernels, as measured with
torch 2.13 (docs/EXHAUSTIVE.md, "16-bit formats", says why each fails), judged under PyTorch's
contract, which its plugin spec gets (tests/test_lowp_contract.py)."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from conformance.lowp.formats import BFLOAT16, FLOAT16
from conformance.lowp.refs import FUNCTIONS
from conformance.peers import torch_lowp
from conformance.plugins import PluginError

pytest.importorskip("ml_dtypes")
REPO = Path(__file__).resolve().parent.parent


def test_every_unary_reference_has_a_torch_kernel_and_a_bound():
    assert set(torch_lowp.UNARY) == set(FUNCTIONS)
    assert {op for op, b in torch_lowp.UNARY.items() if b == 0.5} == {"abs", "relu", "sqrt"}


def test_without_torch_the_plugin_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)      # `import torch` raises ImportError
    with pytest.raises(PluginError, match=r"audits PyTorch's bfloat16 and float16 kernels, but "
                                          r"torch is not importable .*; pip install torch"):
        torch_lowp.ENTRIES()


@pytest.fixture(scope="module")
def torch_cpu():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("the verdicts below are PyTorch's CPU kernels'; this torch sees a GPU")
    return torch


@pytest.mark.parametrize("fmt", [BFLOAT16, FLOAT16], ids=lambda f: f.name)
def test_bits_cross_to_torch_and_back_unchanged(torch_cpu, fmt):
    bits = fmt.all_bits()
    t = torch_lowp._to_torch(torch_cpu, fmt.to_numpy(bits), fmt, "cpu")
    assert t.dtype == torch_lowp._dtype(torch_cpu, fmt) and t.shape == (65536,)
    back = torch_lowp._from_torch(torch_cpu, t.clone(), fmt)
    assert back.dtype == fmt.numpy_dtype() and np.array_equal(back.view(np.uint16), bits)
    # a result of another dtype comes back as float32, for the audit to name
    assert torch_lowp._from_torch(torch_cpu, t.float(), fmt).dtype == np.float32


def test_log_softmax_holds_its_log_sum_exp_in_bfloat16(torch_cpu):
    """torch.log_softmax of bfloat16 [0.25, 0.75, 0.25] on the CPU: -0.796875 at 0.75, where the
    exact value is -0.794377 (correctly rounded -0.79296875): 0.64 ulp, past the half ulp and
    float32 error one rounding allows; the sum 2.2131 rounded to 2.21875, its log to 0.796875."""
    from conformance.lowp.accumulate import judge
    x = np.array([[0.25, 0.75, 0.25]])
    t = torch_cpu.tensor(x, dtype=torch_cpu.bfloat16)
    got = torch_cpu.log_softmax(t, -1).float().numpy().astype(np.float64)
    reason, ref, ulps = judge("log_softmax", BFLOAT16, [x], got)
    assert got[0, 1] == -0.796875 and ref[0, 1] == -0.79296875
    assert reason[0, 1] == "exceeds-bound" and 0.63 < ulps[0, 1] < 0.65


def test_pytorch_cpu_kernels_verdicts(torch_cpu, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proc = subprocess.run([sys.executable, "-m", "conformance.cli", "lowp", "--plugin",
                               "conformance.peers.torch_lowp:ENTRIES", "--evidence-dir",
                               str(tmp_path), "--seed", "7"], cwd=REPO, capture_output=True,
                              text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recs = {}
    for p in tmp_path.glob("lowp-*.json"):
        r = json.loads(p.read_text())
        recs[r["kernel"].removeprefix("torch.cpu.")] = r
    # the CPU has no memory-efficient attention: left out at load time
    assert not any(k.startswith("sdpa_efficient") for k in recs) and len(recs) == 44
    passed = {k for k, r in recs.items() if r["status"] == "passed"}
    assert passed == {f"{op}.{f}" for f in ("bfloat16", "float16") for op in (
        "exp", "log", "sin", "cos", "softplus", "abs", "sum", "matmul", "linear", "sdpa_math")}
    reasons = {k: set(r["failure_reasons"]) for k, r in recs.items() if k not in passed}
    for f in ("bfloat16", "float16"):
        # the log-sum-exp rounded to the format twice; attention weights in the format
        assert "exceeds-bound" in reasons[f"log_softmax.{f}"] <= {
            "exceeds-bound", "flushed-subnormal", "vjp-exceeds-bound"}
        assert {"exceeds-bound", "vjp-exceeds-bound"} <= reasons[f"sdpa.{f}"] == \
            reasons[f"sdpa_flash.{f}"]
        # the backward passes of softmax, log_softmax and layer_norm: not float32 inside, one
        # rounding (sum's, matmul's, linear's and sdpa_math's are)
        assert reasons[f"softmax.{f}"] <= {"vjp-exceeds-bound", "vjp-flushed-subnormal"}
        assert reasons[f"layer_norm.{f}"] == {"vjp-exceeds-bound"}
        # VJPs from the rounded forward output (grad (1 - y^2), grad y (1 - y), -grad y^3 / 2)
        assert "vjp-exceeds-bound" in reasons[f"tanh.{f}"] & reasons[f"sigmoid.{f}"]
        assert "vjp-inf-mismatch" in reasons[f"rsqrt.{f}"]
        assert reasons[f"sqrt.{f}"] == {"vjp-exceeds-bound"}
        # erf's absolute-error approximation near 0; the tanh form's 1 + tanh(u) cancelling
        assert {"exceeds-bound", "flushed-subnormal"} <= reasons[f"erf.{f}"]
        assert "exceeds-bound" in reasons[f"gelu.{f}"]
        # TorchLean's relu(-0) = +0, which PyTorch's contract has no clause for; the gradients
        # at NaN are PyTorch's documented convention (conformance/lowp/conventions.py):
        # differences, listed apart, not failures
        assert reasons[f"relu.{f}"] == {"signed-zero"}
        fmt = BFLOAT16 if f == "bfloat16" else FLOAT16
        nan = int(np.isnan(fmt.decode(fmt.all_bits())).sum())     # 254, 2046: every NaN input
        for op in ("abs", "relu"):
            clauses = recs[f"{op}.{f}"]["differences"]["clauses"]
            assert {k: c["elements"] for k, c in clauses.items()} == {"nan-input-gradient": nan}
    # gelu's backward: (1 + 3k x^2) overflows float32 past |x| = 2^64, 0 * inf = NaN
    assert recs["gelu.bfloat16"]["failure_reasons"]["vjp-nan-mismatch"] > 16000
    assert recs["sigmoid.bfloat16"]["failure_reasons"]["flushed-subnormal"] == 7
