"""The tape: each op records a node with its local VJP; backward walks the nodes in reverse
topological order and accumulates gradients into the leaves that asked for them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from engine.errors import GradientError
from engine.runtime.buffer import AnyBuffer


@dataclass(eq=False)
class Node:
    op: str
    inputs: tuple          # the input Tensors
    vjp: Callable          # grad_out array -> tuple of input gradient arrays (or None)


def backward(root, seed=None) -> None:
    """Accumulate d(root)/d(leaf) into `leaf.grad` for every leaf with requires_grad."""
    if root.node is None and not root.requires_grad:
        raise GradientError(
            f"backward() on a tensor of shape {root.shape} that does not depend on any tensor "
            "with requires_grad=True; create the parameters with requires_grad=True")
    xp = _cupy() if type(root.buffer.data).__module__.startswith("cupy") else _numpy()
    if seed is None:
        grad = xp.ones(root.shape, dtype=xp.float32)
    else:
        data = getattr(seed, "buffer", None)
        data = data.data if data is not None else xp.asarray(seed, dtype=xp.float32)
        grad = AnyBuffer.validate(data, root.shape, "backward() output seed").reshape(root.shape)
    order = _topological(root)
    grads = {id(root): grad}
    for t in reversed(order):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        if t.node is None:
            _accumulate_leaf(t, g)
            continue
        for inp, gi in zip(t.node.inputs, t.node.vjp(g)):
            if gi is None or not inp.requires_grad:
                continue
            gi = AnyBuffer.validate(gi, inp.shape, f"gradient of `{t.node.op}` input").reshape(
                inp.shape)
            prev = grads.get(id(inp))
            grads[id(inp)] = gi if prev is None else prev + gi


def _accumulate_leaf(t, g) -> None:
    from engine.tensor import Tensor
    if not t.requires_grad:
        return
    if t.grad is None:
        t.grad = Tensor(AnyBuffer(g.reshape(-1).copy(), t.device), t.shape)
    else:
        t.grad.buffer.data += g.reshape(-1)


def _topological(root) -> list:
    order, seen, stack = [], set(), [(root, False)]
    while stack:  # iterative DFS: deep graphs must not hit the recursion limit
        t, done = stack.pop()
        if done:
            order.append(t)
            continue
        if id(t) in seen:
            continue
        seen.add(id(t))
        stack.append((t, True))
        if t.node is not None:
            stack.extend((i, False) for i in t.node.inputs if i.requires_grad)
    return order


def _numpy():
    import numpy
    return numpy


def _cupy():
    import cupy
    return cupy
