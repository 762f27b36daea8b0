"""`torchlean-conformance reproduce` for CuPy's findings (conformance/peers/cupy_peer.py's
`cupy_peer.<op>` replays): forward scripts that import cupy (with its cupyx) and NumPy only, call
the CUPY table's text the plugin compiles (conformance/peers/expressions.py), and are classified
under CuPy's contract (conformance/peers/cupy_contract.py) as classify-peers classifies them.
Checked without CuPy: every op's script is written, compiled, fed its case bit for bit and run on
a NumPy/SciPy stand-in of cupy and cupyx; VJP findings, fixtures/plugins/cupy_ufuncs.py's `cupy.*`
files and cupy_peer.* files of another plugin are refused. The helpers are
tests/test_peer_reproducer.py's."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance.peers import expressions as X
from conformance.peers.reproducer import ReproducerError, command_for, reproducer, spec
from test_peer_reproducer import (JAX_REPLAYS, _cli, _constants, _decoded, _edited,
                                  _every_op_replay, _imports, _same_bits)

CUPY_SPEC = "conformance.peers.cupy_peer:ENTRIES"
CUPY_IMPORTS = {"os", "sys", "numpy", "cupy", "cupyx"}    # cupyx ships in CuPy's own wheel


def test_a_cupy_peer_exp_finding_gets_a_forward_script_of_cupy_and_numpy_only(tmp_path):
    """A cupy_peer.exp finding of conformance.peers.cupy_peer (a recorded exp case as CuPy's
    replay): the script calls the table's `cupy.exp(a)`, the plugin's own text, and is classified
    under CuPy's contract (expf's documented 2 ulp); CuPy has no autodiff, so a VJP finding of
    its is refused with the reason."""
    source = next(p for p in JAX_REPLAYS if p.name.startswith("xla.exp-"))
    path = _edited(tmp_path, source, capsule="cupy_peer.exp", device="cuda", plugin=CUPY_SPEC)
    script = reproducer(path)
    assert _imports(script) == CUPY_IMPORTS and X.definition(X.CUPY, "exp") in script
    assert 'os.environ["CUPY_TF32"] = "0"' in script
    compile(script, path.name, "exec")
    s = spec(path)
    assert (s.table, s.device, s.vjp) == (X.CUPY, "cuda", False)
    documented = "documents 2 ulp for exp" in s.why or "over CuPy's documented 2 ulp" in s.why
    assert documented, s.why
    vjp = dict(json.loads(source.read_text())["failures"][0], output="grad[0]",
               reason="vjp-exceeds-bound")
    with pytest.raises(ReproducerError, match="CuPy has no autodiff"):
        reproducer(_edited(tmp_path, path, failures=[vjp]))


def _cupy_ops():
    from conformance.peers.cupy_peer import CUPY_OPS
    return CUPY_OPS


def test_every_cupy_op_gets_a_forward_script_and_its_vjp_finding_is_refused(tmp_path):
    """Every op cupy_peer audits, on a case the project's generator draws: the forward finding's
    script feeds the case bit for bit and calls the table's text; the gradient finding beside it
    is refused (no autodiff), and the file's default script is the forward's."""
    for op in _cupy_ops():
        path = _every_op_replay(tmp_path, op, "cupy_peer", CUPY_SPEC, "cuda")
        case, script = _decoded(path), reproducer(path)
        assert script == reproducer(path, failure=0), op
        compile(script, path.name, "exec")
        assert _imports(script) == CUPY_IMPORTS and X.definition(X.CUPY, op.label) in script
        data = _constants(script)
        assert all(_same_bits(a, b) for a, b in zip(data["INPUTS"], case.inputs)), op
        assert (data["OUTPUT"], "COTANGENT" in data) == (0, False), op
        assert data["DECIDES"] is (data["CLASS"] == "defect"), (op, data["WHY"])
        with pytest.raises(ReproducerError, match="VJP finding, and CuPy has no autodiff"):
            reproducer(path, failure=1)


def test_a_cupy_reduction_and_softmax_keep_their_parameters(tmp_path):
    """reduce_sum's axes and keepdims, log_softmax's axis: the script's P is the case's, and the
    expressions (with the helpers they call) are the plugin's."""
    from engine.types import BackendOp as Op
    for op, helper in ((Op.reduce_sum, "def reduce("), (Op.log_softmax, None),
                       (Op.scatter_add, "def index_add(")):
        path = _every_op_replay(tmp_path, op, "cupy_peer", CUPY_SPEC, "cuda")
        case, script = _decoded(path), reproducer(path)
        data = _constants(script)
        assert case.params and set(data["P"]) == set(case.params), op
        for k, v in case.params.items():
            assert _same_bits(data["P"][k], v) if isinstance(v, np.ndarray) else \
                data["P"][k] == (list(v) if isinstance(v, tuple) else v), (op, k)
        assert X.CUPY.ops[op.label].body in script and (helper is None or helper in script)


def _convention_replay(tmp_path, op, inputs, params, at, got) -> Path:
    """A forward finding of cupy_peer.<op> at element `at` on the given case: the kernel's value
    `got` where TorchLean's reference gives another (written by the project's replay writer)."""
    import dataclasses
    from conformance.failures import Failure, hex32, num
    from conformance.generators import draw_case
    from conformance.references import get as get_reference
    from conformance.replay import write_replay
    case = dataclasses.replace(draw_case(op, 7, "normal", 0), inputs=tuple(inputs),
                               params=params, cotangent=None)
    with np.errstate(all="ignore"):
        ref = get_reference(op.label).forward(case.inputs, **params)
    want = np.float32(np.asarray(ref.value, np.float32)[at])
    exact = float(np.asarray(ref.exact, np.float64)[at])
    reason = "nan-mismatch" if np.isnan(want) != np.isnan(got) else "not-bitwise"
    f = Failure("value", list(at), reason, hex32(want), num(want), hex32(np.float32(got)),
                num(np.float32(got)), exact, "nan", None, "nan", {})
    path = tmp_path / f"cupy_peer.{op.label}-rule.json"
    write_replay(path, f"cupy_peer.{op.label}", case, [f], CUPY_SPEC, "cuda")
    return path


def test_cupys_own_rules_classify_its_findings_as_conventions(tmp_path):
    """Through CuPy's contract (conformance/peers/cupy_contract.py), as classify-peers does:
    log_softmax's shift by 0 at a +inf row max (SciPy's formula: -inf beside the +inf, TorchLean
    NaN), and clip comparing a subnormal as zero under -ftz=true (clip(-1e-40, 0, 1) is -1e-40,
    TorchLean +0: a rule only the flushed read gives): each a convention, its script exit 0."""
    from engine.types import BackendOp as Op
    row = np.array([[np.inf, 1.0, 2.0]], np.float32)
    shift = _convention_replay(tmp_path, Op.log_softmax, [row], {"axis": -1}, (0, 1), -np.inf)
    tiny = np.array([-1e-40, 0.5], np.float32)
    clip = _convention_replay(tmp_path, Op.clamp, [tiny], {"lo": 0.0, "hi": 1.0}, (0,),
                              np.float32(-1e-40))
    for path, clause in ((shift, "shift-zero-at-nonfinite-max"), (clip, "clip-compares-flushed")):
        s = spec(path)
        assert (s.cls, s.vjp) == ("convention", False), (path.name, s.cls, s.why)
        assert f"CuPy's rule `{clause}`" in s.why and "undocumented" in s.why
        data = _constants(reproducer(path))
        assert data["DECIDES"] is False and data["CLASS"] == "convention"
        assert _constants(reproducer(path, against="torchlean"))["DECIDES"] is True
        assert command_for(path) is None                    # no defect: no report link


def _cupy_stand_in(tmp_path) -> Path:
    """`cupy` and `cupyx` packages made of NumPy and SciPy (CuPy's API is theirs), on which a
    CuPy script runs on the CPU: the same stand-in as tests/test_peer_cupy.py's, as files."""
    site = tmp_path / "stand-in"
    files = {
        "cupy/__init__.py": "import types as _t\nimport numpy as _np\n"
                            "__version__ = '14.2.0-stand-in'\n"
                            "cuda = _t.SimpleNamespace(runtime=_t.SimpleNamespace("
                            "getDevice=lambda: 0))\n"
                            "def asnumpy(a):\n    return _np.asarray(a)\n"
                            "def __getattr__(name):\n    return getattr(_np, name)\n",
        "cupyx/__init__.py": "import numpy as _np\nscatter_add = _np.add.at\n",
        "cupyx/scipy/__init__.py": "",
        "cupyx/scipy/special/__init__.py": "from scipy.special import expit, log_softmax, "
                                           "softmax  # noqa: F401\n",
    }
    for name, text in files.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    return site


def test_every_cupy_script_computes_the_ops_value_on_a_numpy_stand_in(tmp_path):
    """Each op's script run under the NumPy/SciPy stand-in of CuPy: its value is within 1e-3 of
    the reference's, so it computes the op with its parameters (axes, keepdims, axis, perm,
    indices, trans flags) on the recorded inputs. On a GPU, with CuPy, the same scripts run
    CuPy's kernels."""
    import os
    env = dict(os.environ, PYTHONPATH=str(_cupy_stand_in(tmp_path)), PYTHONDONTWRITEBYTECODE="1")
    for op in _cupy_ops():
        path = _every_op_replay(tmp_path, op, "cupy_peer", CUPY_SPEC, "cuda")
        (tmp_path / "r.py").write_text(reproducer(path))
        proc = subprocess.run([sys.executable, str(tmp_path / "r.py")], capture_output=True,
                              text=True, timeout=300, env=env, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout.startswith(
            "CuPy 14.2.0-stand-in on cuda:0: ") and proc.stdout.rstrip().endswith(
            ("within TorchLean's bound now", ": fixed")), (op, proc.stdout, proc.stderr)


def test_cupy_files_of_other_plugins_are_refused(tmp_path):
    """fixtures/plugins/cupy_ufuncs.py's `cupy.<op>` (the exhaustive sweeps) and a cupy_peer.*
    file of another plugin (fixtures/plugins/cupy_stand_ins.py names its stand-ins so): their
    functions are not the table's, so no script is written."""
    source = next(p for p in JAX_REPLAYS if p.name.startswith("xla.exp-"))
    for capsule, plugin in (("cupy.exp", "fixtures.plugins.cupy_ufuncs:ENTRIES"),
                            ("cupy.exp", CUPY_SPEC),
                            ("cupy_peer.exp", "fixtures.plugins.cupy_stand_ins:ENTRIES")):
        path = _edited(tmp_path, source, capsule=capsule, device="cuda", plugin=plugin)
        with pytest.raises(ReproducerError, match="not by conformance.peers.cupy_peer"):
            reproducer(path)
        assert command_for(path) is None
    proc = _cli(path)
    assert proc.returncode == 2 and proc.stdout == "" and "cupy_stand_ins" in proc.stderr
