"""SGD, Adam and AdamW update values, checked against the update rules evaluated in float64."""
import numpy as np
import pytest

import engine
from engine import ops
from engine.errors import ShapeError
from engine.optim import SGD, Adam, AdamW


def _param_with_grad(values, grad):
    p = engine.tensor(values, requires_grad=True)
    ops.reduce_sum(ops.mul(p, engine.tensor(grad))).backward()   # d/dp sum(p * g) = g
    return p


def test_sgd_step(cpu_session):
    p = _param_with_grad([1.0, -2.0], [0.5, -4.0])
    SGD([p], lr=0.1).step()
    np.testing.assert_array_equal(p.numpy(), np.float32([1.0, -2.0]) - np.float32(0.1) *
                                  np.float32([0.5, -4.0]))


def test_adam_three_steps_match_float64(cpu_session):
    g = np.array([0.5, -4.0, 1e-3], np.float32)
    p = _param_with_grad([1.0, -2.0, 0.25], g)
    opt = Adam([p], lr=0.03)
    ref = np.array([1.0, -2.0, 0.25])
    m = v = np.zeros(3)
    for t in range(1, 4):
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g.astype(np.float64) ** 2
        ref = ref - 0.03 * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    # Each float32 step rounds about ten times; 3 steps at |update| <= lr stay within 1e-6.
    np.testing.assert_allclose(p.numpy(), ref, rtol=0, atol=1e-6)
    opt.zero_grad()
    assert p.grad is None


def test_bad_learning_rate_is_named():
    with pytest.raises(ShapeError, match="learning rate must be a positive finite number, got -1"):
        SGD([], lr=-1)


def test_adamw_three_steps_match_numpy_reference(cpu_session):
    """Decoupled decay: p <- p (1 - lr wd), then the Adam step; the undecayed parameter takes the
    plain Adam step (its reference is the same loop with wd = 0)."""
    g = np.array([0.5, -4.0, 1e-3], np.float32)
    p = _param_with_grad([1.0, -2.0, 0.25], g)
    q = _param_with_grad([3.0, -1.0, 0.5], g)
    opt = AdamW([p, q], lr=0.03, weight_decay=0.1, decay=[True, False])
    refs = {0.1: np.array([1.0, -2.0, 0.25]), 0.0: np.array([3.0, -1.0, 0.5])}
    m = v = np.zeros(3)
    for t in range(1, 4):
        opt.step()
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g.astype(np.float64) ** 2
        for wd, ref in refs.items():
            refs[wd] = ref * (1 - 0.03 * wd) - 0.03 * (m / (1 - 0.9 ** t)) / (
                np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    # As for Adam, plus one rounding of the decay product per step: 3 steps stay within 1e-6.
    np.testing.assert_allclose(p.numpy(), refs[0.1], rtol=0, atol=1e-6)
    np.testing.assert_allclose(q.numpy(), refs[0.0], rtol=0, atol=1e-6)
    # The decay moved p by about lr * wd * |p| * 3 steps (~1e-2 at p = 1): far beyond atol.
    assert abs(float(p.numpy()[0]) - float(q.numpy()[0] - 2.0)) > 5e-3


def test_adamw_bad_arguments_are_named():
    with pytest.raises(ShapeError, match="weight_decay must be a finite number >= 0, got -0.5"):
        AdamW([], weight_decay=-0.5)
    with pytest.raises(ShapeError, match="decay has 1 entries for 0 parameters"):
        AdamW([], decay=[True])
