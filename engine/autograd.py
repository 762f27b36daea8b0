"""The tape: each op records a node with its local VJP; backward walks the nodes in reverse
topological order and accumulates gradients into the leaves that asked for them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.errors import GradientError
from engine.runtime.buffer import AnyBuffer


@dataclass(eq=False)
class Node:
    op: str
    inputs: tuple          # the input Tensors
    vjp: Callable          # grad_out array -> tuple of input gradient arrays (or None)
    session: object = None  # the session whose plan ran the op: gradients accumulate there


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
        if data is not None:
            data = data.data
        elif type(seed).__module__.startswith("cupy"):
            data = seed
        else:   # through a flat host copy: CuPy's rank-0 fill would turn -0.0 into +0.0
            host = np.asarray(seed, dtype=np.float32)
            data = xp.asarray(host.reshape(-1)).reshape(host.shape)
        grad = AnyBuffer.validate(data, root.shape, "backward() output seed").reshape(root.shape)
    order = _topological(root)
    from engine.session import current_session
    session = root.node.session if root.node is not None and root.node.session else \
        current_session()
    grads = {id(root): grad}
    for t in reversed(order):
        g = grads.pop(id(t), None)
        if g is None:
            continue
        if t.node is None:
            _accumulate_leaf(session, t, g)
            continue
        for inp, gi in zip(t.node.inputs, t.node.vjp(g)):
            if gi is None or not inp.requires_grad:
                continue
            gi = AnyBuffer.validate(gi, inp.shape, f"gradient of `{t.node.op}` input").reshape(
                inp.shape)
            prev = grads.get(id(inp))
            grads[id(inp)] = gi if prev is None else _add(session, prev, gi)


def _add(session, a, b):
    """Gradients accumulate through the plan's add capsule, so they obey its numerical policy
    (CuPy's own elementwise kernels are compiled with -ftz=true and would flush subnormals)."""
    from engine.types import BackendOp
    kernel = session.kernel_for(BackendOp.add)
    session.dispatched.setdefault(BackendOp.add, kernel.capsule)
    return kernel.handler.forward(a, b)


def _accumulate_leaf(session, t, g) -> None:
    from engine.tensor import Tensor
    if not t.requires_grad:
        return
    g = g.reshape(t.shape)
    total = g.copy() if t.grad is None else _add(session, t.grad.view(), g)
    t.grad = Tensor(AnyBuffer(total.reshape(-1), t.device), t.shape)


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
