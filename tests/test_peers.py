"""conformance/peers/torch_cuda.py: PyTorch's CUDA kernels as `--plugin` entries.

On the CPU (no torch, or no GPU): the plugin and bench_kernels refuse with a PluginError naming
what to install, our default capsule of an op is picked from the registry (variants second), and a
peer declares exactly our capsule's policy and bound. With torch and a GPU (marked `cuda`): one
entry per op that has our capsule and a peer, forward and VJP of the entries against PyTorch's own
float64 evaluation, no output aliasing an input, hard-masked rows of zeros."""
from __future__ import annotations

import dataclasses
import importlib.util
import types

import numpy as np
import pytest

from conformance.peers import torch_cuda
from conformance.plugins import PluginError, load_plugin
from engine.registry import registry
from engine.types import BackendOp as Op, Device, Provider, VJPMode

SPEC = "conformance.peers.torch_cuda:ENTRIES"
HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_no_torch = pytest.mark.skipif(HAVE_TORCH, reason="torch is installed here: the refusal "
                                                       "without torch cannot be seen")


@needs_no_torch
def test_plugin_without_torch_names_what_to_install():
    with pytest.raises(PluginError) as exc:
        load_plugin(SPEC)
    text = str(exc.value)
    assert "torch is not importable" in text and "pip install torch" in text
    assert "factory raised" not in text     # the factory's own diagnosis, not wrapped


@needs_no_torch
def test_cli_run_without_torch_is_a_usage_error(capsys):
    from conformance.cli import main
    rc = main(["run", "--plugin", SPEC, "--quick", "--no-progress"])
    assert rc == 2
    assert "pip install torch" in capsys.readouterr().err


@needs_no_torch
def test_bench_kernels_without_torch_exits_2(capsys):
    from benchmarks.bench_kernels import main
    assert main(["--quick"]) == 2
    assert "torch is not importable" in capsys.readouterr().err


def test_our_default_capsule_is_not_the_accurate_variant():
    native = registry().get("native_cuda.softmax")[0]
    variant = dataclasses.replace(native, name="native_cuda.softmax.accurate")
    assert torch_cuda.our_capsule(Op.softmax, [variant, native]) is native
    assert torch_cuda.our_capsule(Op.softmax, [variant]) is variant
    assert torch_cuda.our_capsule(Op.softmax, [registry().get("reference.softmax")[0]]) is None


def test_peer_declares_our_policy_and_bound():
    fake_torch = types.SimpleNamespace(__version__="9.9")
    for op in (Op.gelu, Op.reduce_sum, Op.layer_norm, Op.matmul):
        ours = torch_cuda.our_capsule(op, registry().capsules())
        peer = torch_cuda.peer_capsule(ours, fake_torch)
        assert peer.name == f"aten.{op.label}" and peer.op is op
        assert (peer.provider, peer.device, peer.vjp_mode) == (Provider.aten, Device.cuda,
                                                               VJPMode.backend_vjp)
        assert peer.numerical_policy == ours.numerical_policy
        assert peer.value_contract.declared_bound == ours.value_contract.declared_bound
        assert ours.name in peer.notes


def test_every_peer_op_has_our_capsule_and_a_reference():
    from conformance import references
    for op in torch_cuda.PEER_OPS:
        assert torch_cuda.our_capsule(op, registry().capsules()) is not None, op
        assert op.label in references.OPS


# --- on a GPU, with torch ------------------------------------------------------------------------

def _torch_cuda():
    try:
        return torch_cuda.require_torch_cuda()
    except PluginError as exc:
        pytest.skip(str(exc))


@pytest.mark.cuda
def test_entries_one_per_op_with_our_capsule():
    torch = _torch_cuda()
    assert set(torch_cuda.peer_functions(torch)) == set(torch_cuda.PEER_OPS)
    entries = load_plugin(SPEC)
    names = [e.capsule.name for e in entries]
    assert names == [f"aten.{op.label}" for op in torch_cuda.PEER_OPS]
    assert not torch.backends.cuda.matmul.allow_tf32


def _inputs(cp, rng, op):
    n = lambda *s: cp.asarray(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    pos = lambda *s: cp.abs(n(*s)) + cp.float32(0.1)  # noqa: E731
    unary = {Op.abs: {}, Op.relu: {}, Op.gelu: {}, Op.sigmoid: {}, Op.tanh: {}, Op.softplus: {},
             Op.exp: {}, Op.sin: {}, Op.cos: {}, Op.clamp: {"lo": -0.5, "hi": 0.5},
             Op.scale: {"alpha": 1.5}, Op.softmax: {"axis": -1}, Op.log_softmax: {"axis": 0},
             Op.reduce_sum: {"axes": (1,), "keepdims": True}, Op.reduce_mean: {"axes": None},
             Op.reshape: {"shape": (8, 6)}, Op.permute: {"perm": (1, 0)},
             Op.broadcast: {"shape": (3, 6, 8)}, Op.slice: {"axis": 0, "start": 0, "stop": 3},
             Op.gather: {"axis": 1, "indices": np.array([0, 7, 7, 2])}}
    if op in unary:
        return (n(6, 8),), unary[op]
    if op in (Op.sqrt, Op.log, Op.inv, Op.safe_log):
        return (pos(6, 8),), {}
    if op in (Op.add, Op.sub, Op.mul, Op.max, Op.min, Op.mse_loss):
        return (n(6, 8), n(6, 8)), {}
    if op is Op.concat:
        return (n(2, 8), n(3, 8)), {"axis": 0}
    if op is Op.scatter_add:
        return (n(6, 8), n(6, 3)), {"axis": 1, "indices": np.array([1, 1, 5])}
    if op is Op.hard_masked_softmax:
        mask = rng.random((6, 8)) < 0.5
        mask[2] = False
        return (n(6, 8),), {"mask": mask, "axis": -1}
    if op is Op.layer_norm:
        return (n(6, 8), n(8), n(8)), {"eps": 1e-5}
    if op is Op.batch_norm:
        return (n(4, 3, 5), n(3), n(3)), {"eps": 1e-5}
    if op is Op.scaled_dot_product_attention:
        return (n(2, 5, 4), n(2, 6, 4), n(2, 6, 3)), {"mask": rng.random((2, 5, 6)) < 0.7,
                                                      "scale": 0.5}
    if op is Op.matmul:
        return (n(5, 4), n(6, 4)), {"trans_b": True}
    if op is Op.linear:
        return (n(5, 4), n(6, 4), n(6)), {}
    raise AssertionError(f"no test input for {op.label}")


@pytest.mark.cuda
@pytest.mark.parametrize("op", torch_cuda.PEER_OPS, ids=lambda op: op.label)
def test_entry_forward_and_vjp_against_float64_torch(op):
    """The entry is PyTorch's float32 kernel of the function the peer defines: it agrees with the
    same function in float64 to float32 accuracy (1e-5 relative to the largest magnitude; these
    small well-scaled inputs have no cancellation beyond that), its gradients have the inputs'
    shapes, and nothing it returns shares memory with what it was given."""
    torch = _torch_cuda()
    import cupy as cp
    entry = {e.capsule.op: e for e in load_plugin(SPEC)}[op]
    fn = torch_cuda.peer_functions(torch)[op]
    arrays, params = _inputs(cp, np.random.default_rng(list(Op).index(op)), op)
    out = entry.forward(*arrays, **params)
    ref = fn(*[torch.from_dlpack(a).double() for a in arrays], **params)
    got = cp.asnumpy(out).astype(np.float64)
    want = ref.detach().cpu().numpy()
    assert got.shape == want.shape and out.dtype == np.float32
    assert np.allclose(got, want, rtol=0, atol=1e-5 * max(1.0, np.abs(want).max())), op
    assert all(out.data.ptr != a.data.ptr for a in arrays)   # reshape's view is cloned
    g = cp.asarray(np.random.default_rng(5).standard_normal(out.shape).astype(np.float32))
    grads = entry.vjp(arrays, out, g, **params)
    assert [d.shape for d in grads] == [a.shape for a in arrays]
    leaves = [torch.from_dlpack(a).double().requires_grad_(True) for a in arrays]
    want_g = torch.autograd.grad(fn(*leaves, **params), leaves, torch.from_dlpack(g).double(),
                                 allow_unused=True)
    for d, w in zip(grads, want_g):
        w = np.zeros(d.shape) if w is None else w.cpu().numpy()
        assert np.allclose(cp.asnumpy(d), w, rtol=0, atol=1e-5 * max(1.0, np.abs(w).max())), op


@pytest.mark.cuda
def test_hard_masked_softmax_blocked_row_is_zeros_with_zero_gradient():
    _torch_cuda()
    import cupy as cp
    entry = {e.capsule.op: e for e in load_plugin(SPEC)}[Op.hard_masked_softmax]
    arrays, params = _inputs(cp, np.random.default_rng(3), Op.hard_masked_softmax)
    out = cp.asnumpy(entry.forward(*arrays, **params))
    assert np.array_equal(out[2], np.zeros(8, np.float32))
    assert np.all(out[~params["mask"]] == 0)
    (d,) = entry.vjp(arrays, cp.asarray(out), cp.ones((6, 8), cp.float32), **params)
    assert np.array_equal(cp.asnumpy(d)[2], np.zeros(8, np.float32))
