"""The tape: each op records a node with its local VJP; backward walks the nodes in reverse
topological order and accumulates gradients into the leaves that asked for them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.errors import GradientError
from engine.runtime.buffer import AnyBuffer
from engine.runtime.capture_state import CAPTURE, note_op, note_vjp
from engine.runtime.device_buffer import to_device


@dataclass(eq=False, slots=True)   # slots: one record per op while grad is on
class Node:
    op: str
    inputs: tuple          # the input Tensors
    vjp: Callable | None   # grad_out array -> tuple of input gradient arrays; None once freed
    session: object = None  # the session whose plan ran the op: gradients accumulate there


def _seed_shape(seed) -> tuple:
    shape = getattr(seed, "shape", None)
    return tuple(shape) if shape is not None else np.shape(seed)


def backward(root, seed=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into `leaf.grad` for every leaf with requires_grad.
    PyTorch's conventions: without a seed the root must hold one element; a seed has exactly the
    root's shape; the graph's saved state is freed afterwards unless `retain_graph`, and a second
    backward through a freed graph raises instead of accumulating again."""
    if root.node is None and not root.requires_grad:
        raise GradientError(
            f"backward() on a tensor of shape {root.shape} that does not depend on any tensor "
            "with requires_grad=True; create the parameters with requires_grad=True")
    xp = _cupy() if type(root.buffer.data).__module__.startswith("cupy") else _numpy()
    order = _topological(root)
    if any(t.node is not None and t.node.vjp is None for t in order):
        raise GradientError(
            "backward() through a graph a second time: the first backward() freed its saved "
            "values; pass retain_graph=True to the first call to run backward again")
    if seed is None:
        if root.numel != 1:
            raise GradientError(
                f"backward() without a seed needs a tensor of one element, this one has shape "
                f"{root.shape}; pass a seed of exactly that shape, e.g. "
                f"y.backward(np.ones({root.shape}, np.float32))")
        grad = xp.ones(root.shape, dtype=xp.float32)
    else:
        if _seed_shape(seed) != tuple(root.shape) and int(np.prod(_seed_shape(seed))) == \
                root.numel:
            raise GradientError(
                f"backward() seed has shape {_seed_shape(seed)}, the output has shape "
                f"{tuple(root.shape)}; pass a seed of exactly the output's shape")
        data = getattr(seed, "buffer", None)
        if data is not None:
            data = data.data
        elif type(seed).__module__.startswith("cupy"):
            data = seed
        else:   # a host seed: on CUDA through to_device, which keeps a rank-0 -0.0
            host = np.asarray(seed, dtype=np.float32)
            data = host.reshape(-1).reshape(host.shape) if xp is np else to_device(host)
        grad = AnyBuffer.validate(data, root.shape, "backward() output seed").reshape(root.shape)
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
        if CAPTURE.recording:
            note_vjp(t.node.op)
        for inp, gi in zip(t.node.inputs, t.node.vjp(g)):
            if gi is None or not inp.requires_grad:
                continue
            gi = AnyBuffer.validate(gi, inp.shape, f"gradient of `{t.node.op}` input").reshape(
                inp.shape)
            prev = grads.get(id(inp))
            grads[id(inp)] = gi if prev is None else _add(session, prev, gi)
    if not retain_graph:
        for t in order:
            if t.node is not None:
                t.node.vjp = None   # drops the saved inputs and outputs the rule closed over


def _add(session, a, b):
    """Gradients accumulate through the plan's add capsule, so they obey its numerical policy
    (CuPy's own elementwise kernels are compiled with -ftz=true and would flush subnormals)."""
    from engine.types import BackendOp
    kernel = session.kernel_for(BackendOp.add)
    session.dispatched.setdefault(BackendOp.add, kernel.capsule)
    if CAPTURE.recording:
        note_op(BackendOp.add, kernel.capsule.name)
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
