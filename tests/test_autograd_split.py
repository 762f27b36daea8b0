"""An op whose output is handed out in parts (engine.autograd.split; add_layer_norm's [s, y]): the
parts are views of the one output, each its own tape edge; their cotangents reach the op's rule
as Parts (None where no gradient reached a part), a part used twice accumulates, a part may be
the root of backward, and retain_graph lets the walk run again. On the CPU through the reference
capsule; the values against the composition add -> layer_norm."""
import numpy as np
import pytest

from engine import ops
from engine.autograd import Parts
from engine.errors import GradientError, ShapeError
from engine.ops._dispatch import LOCAL_VJP
from engine.tensor import tensor
from engine.types import RuntimeEntry as Entry

f32 = np.float32


def _data(seed=0, shape=(3, 5, 8)):
    rng = np.random.default_rng(seed)
    d = shape[-1]
    return (rng.standard_normal(shape).astype(f32), rng.standard_normal(shape).astype(f32),
            (1 + 0.1 * rng.standard_normal(d)).astype(f32), rng.standard_normal(d).astype(f32))


def _leaves(arrays):
    return [tensor(a, requires_grad=True) for a in arrays]


def _loss(s, y, w1, w2):
    return ops.add(ops.reduce_sum(ops.mul(s, tensor(w1))), ops.reduce_sum(ops.mul(y, tensor(w2))))


def test_the_parts_are_views_of_one_output_with_the_compositions_values():
    x, r, gamma, beta = _data()
    s, y = ops.add_layer_norm(*(tensor(a) for a in (x, r, gamma, beta)))
    assert s.shape == y.shape == x.shape
    np.testing.assert_array_equal(s.numpy(), x + r)
    want = ops.layer_norm(tensor(x + r), tensor(gamma), tensor(beta)).numpy()
    np.testing.assert_array_equal(y.numpy(), want)
    assert s.node is None and y.node is None   # nothing requires a gradient: no tape


def test_gradients_match_the_composition():
    """dgamma, dbeta and the forward bit for bit; dx = dr within one rounding of the
    composition's (the fused rule rounds layer_norm's float64 dx plus gs once, the composition
    rounds dx, then the tape adds gs)."""
    arrays = _data(1)
    rng = np.random.default_rng(2)
    w1, w2 = rng.standard_normal(arrays[0].shape).astype(f32), \
        rng.standard_normal(arrays[0].shape).astype(f32)
    fused = _leaves(arrays)
    s, y = ops.add_layer_norm(*fused)
    _loss(s, y, w1, w2).backward()
    comp = _leaves(arrays)
    s2 = ops.add(comp[0], comp[1])
    _loss(s2, ops.layer_norm(s2, comp[2], comp[3]), w1, w2).backward()
    np.testing.assert_array_equal(fused[0].grad.numpy(), fused[1].grad.numpy())
    for a, b in zip(fused[2:], comp[2:]):
        np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())
    got, want = fused[0].grad.numpy().astype(np.float64), comp[0].grad.numpy().astype(np.float64)
    v = np.abs(want - w1) * (1 + 2.0 ** -20)
    tol = np.spacing(np.abs(got).astype(f32)) + np.spacing(np.abs(want).astype(f32)) + \
        np.spacing(v.astype(f32))
    assert np.all(np.abs(got - want) <= tol)


def test_the_rule_gets_parts_with_none_for_a_part_without_gradient(monkeypatch):
    seen = []
    rule = LOCAL_VJP[Entry.add_layer_norm]

    def spy(inputs, out, g, **params):
        seen.append(g)
        return rule(inputs, out, g, **params)
    spy.tape_saves = rule.tape_saves
    monkeypatch.setitem(LOCAL_VJP, Entry.add_layer_norm, spy)
    leaves = _leaves(_data(3))
    s, y = ops.add_layer_norm(*leaves)
    ops.reduce_sum(y).backward()
    (g,) = seen
    assert isinstance(g, Parts) and len(g) == 2 and g[0] is None
    np.testing.assert_array_equal(g[1], np.ones(y.shape, f32))
    # y alone: dgamma is layer_norm's, dx = dr is layer_norm's dx
    comp = _leaves(_data(3))
    ops.reduce_sum(ops.layer_norm(ops.add(comp[0], comp[1]), comp[2], comp[3])).backward()
    np.testing.assert_array_equal(leaves[2].grad.numpy(), comp[2].grad.numpy())
    np.testing.assert_array_equal(leaves[0].grad.numpy() + f32(0), comp[0].grad.numpy() + f32(0))


def test_only_the_sum_used_passes_its_cotangent_through():
    leaves = _leaves(_data(4))
    s, _ = ops.add_layer_norm(*leaves)
    w = np.random.default_rng(5).standard_normal(s.shape).astype(f32)
    ops.reduce_sum(ops.mul(s, tensor(w))).backward()
    np.testing.assert_array_equal(leaves[0].grad.numpy(), w)
    np.testing.assert_array_equal(leaves[1].grad.numpy(), w)
    np.testing.assert_array_equal(leaves[2].grad.numpy(), np.zeros(8, f32))


def test_a_part_used_twice_accumulates_and_a_part_can_be_the_root():
    arrays = _data(6)
    a = _leaves(arrays)
    s, y = ops.add_layer_norm(*a)
    ops.add(ops.reduce_sum(s), ops.reduce_sum(s)).backward()
    np.testing.assert_array_equal(a[0].grad.numpy(), np.full(s.shape, 2, f32))
    b = _leaves(arrays)
    _, y = ops.add_layer_norm(*b)
    seed = np.random.default_rng(7).standard_normal(y.shape).astype(f32)
    y.backward(seed)
    np.testing.assert_array_equal(b[3].grad.numpy(), seed.astype(np.float64).sum(axis=(0, 1))
                                  .astype(f32))


def test_retain_graph_runs_the_walk_twice_and_a_freed_graph_refuses():
    leaves = _leaves(_data(8))
    s, y = ops.add_layer_norm(*leaves)
    loss = ops.add(ops.reduce_sum(s), ops.reduce_sum(y))
    loss.backward(retain_graph=True)
    first = leaves[0].grad.numpy().copy()
    loss.backward()
    np.testing.assert_array_equal(leaves[0].grad.numpy(), 2 * first)   # f + f = 2f exactly
    with pytest.raises(GradientError, match="a second time"):
        loss.backward()


def test_shapes_are_checked():
    x, r, gamma, beta = (tensor(a) for a in _data())
    with pytest.raises(ShapeError, match=r"r of x's shape.*got \(3, 5, 8\), \(5, 8\)"):
        ops.add_layer_norm(x, tensor(np.zeros((5, 8), f32)), gamma, beta)
    with pytest.raises(ShapeError, match=r"gamma \[d\], beta \[d\]"):
        ops.add_layer_norm(x, r, tensor(np.ones(3, f32)), beta)
