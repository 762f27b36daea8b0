"""The tape: each op records a node with its local VJP rule and the values that rule reads;
backward walks the nodes in reverse topological order and accumulates gradients into the leaves
that asked for them.

What the tape keeps alive is what PyTorch's autograd keeps: a node points at its inputs' nodes
(or at the leaf tensors that collect gradients), never at the intermediate tensors themselves, so
an activation lives on only while a rule needs it. A rule declares the values it reads with
`@saves(...)`; the others are replaced by an `Unsaved` stand-in (shape and dtype only) as the op
runs. backward frees each node's saved values as soon as its rule has run and drops each
cotangent once it has been passed on, so the backward pass releases the forward's activations as
it goes."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.errors import GradientError
from engine.runtime.buffer import AnyBuffer
from engine.runtime.capture_state import CAPTURE, note_op, note_vjp
from engine.runtime.device_buffer import to_device
from engine.tape_saves import Unsaved, stand_ins


@dataclass(eq=False, slots=True)   # slots: one record per op while grad is on
class Node:
    op: str
    inputs: tuple          # per input: its producer Node, the leaf Tensor that collects its
                           # gradient, or None (no gradient flows there)
    shapes: tuple          # per input: its shape (each gradient is checked against it)
    rule: Callable | None  # rule(saved, output, g, **params); None once freed
    saved: tuple | None    # the input arrays the rule reads; Unsaved for the others
    output: object         # the forward output, or Unsaved
    params: dict | None
    session: object = None  # the session whose plan ran the op: gradients accumulate there

    def vjp(self, g) -> tuple:
        return self.rule(self.saved, self.output, g, **self.params)

    def free(self) -> None:
        """Drop the saved values (backward without retain_graph)."""
        self.rule = self.saved = self.output = self.params = None

    def kept(self) -> list:
        """The arrays this node keeps alive (inputs and output, Unsaved ones left out)."""
        if self.rule is None:
            return []
        return [a for a in self.saved + (self.output,)
                if a is not None and not isinstance(a, Unsaved)]


def record(op: str, inputs: tuple, arrays: tuple, out, rule: Callable, params: dict,
           session) -> Node:
    """The node of one op whose inputs include a tensor that requires a gradient."""
    saved, output = stand_ins(rule, arrays, out)
    edges = tuple(t.node if t.node is not None else (t if t.requires_grad else None)
                  for t in inputs)
    return Node(op, edges, tuple(t.shape for t in inputs), rule, saved, output, params, session)


class Part:
    """One part's cotangent on its way to an op whose output is handed out in parts (`split`)."""
    __slots__ = ("index", "count", "g")

    def __init__(self, index: int, count: int, g) -> None:
        self.index, self.count, self.g = index, count, g


class Parts(tuple):
    """The cotangent of an output handed out in parts: one array per part, None for a part no
    gradient reached (zero). A rule of such an op takes it in place of one stacked array, so the
    parts' gradients are never copied into a stack with zeros for the missing ones: that copy
    would cost the passes the fused op saves."""
    __slots__ = ()


def _pick(saved, output, g, index, count):
    return (Part(index, count, g),)


def split(result, count: int) -> tuple:
    """The `count` parts of `result` along its first axis (result.shape[0] == count), each a view
    of its buffer (no copy). A part is its own tape edge: its gradient reaches result's node as
    one part of a `Parts` cotangent."""
    from engine.tensor import Tensor
    shape = tuple(result.shape[1:])
    n = result.numel // count
    flat = result.buffer.data
    node = result.node
    parts = []
    for i in range(count):
        t = Tensor(AnyBuffer(flat[i * n:(i + 1) * n], result.device, 4 * n), shape,
                   requires_grad=result.requires_grad, numel=n)
        if node is not None:
            t.node = Node(f"{node.op}[{i}]", (node,), (result.shape,), _pick, (), None,
                          {"index": i, "count": count}, node.session)
        parts.append(t)
    return tuple(parts)


def _seed_shape(seed) -> tuple:
    shape = getattr(seed, "shape", None)
    return tuple(shape) if shape is not None else np.shape(seed)


def backward(root, seed=None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) into `leaf.grad` for every leaf with requires_grad.
    PyTorch's conventions: without a seed the root must hold one element; a seed has exactly the
    root's shape; the graph's saved state is freed as the walk passes each node unless
    `retain_graph`, and a second backward through a freed graph raises instead of accumulating
    again."""
    if root.node is None and not root.requires_grad:
        raise GradientError(
            f"backward() on a tensor of shape {root.shape} that does not depend on any tensor "
            "with requires_grad=True; create the parameters with requires_grad=True")
    xp = _cupy() if type(root.buffer.data).__module__.startswith("cupy") else _numpy()
    start = root.node if root.node is not None else root
    order = _topological(start)
    if any(isinstance(v, Node) and v.rule is None for v in order):
        raise GradientError(
            "backward() through a graph a second time: the first backward() freed its saved "
            "values; pass retain_graph=True to the first call to run backward again")
    owned = True    # a gradient the tape made itself may become a leaf's .grad without a copy
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
        owned = False   # the caller's array
    from engine.session import current_session
    session = root.node.session if root.node is not None and root.node.session else \
        current_session()
    grads = {start: (grad, owned)}
    del grad
    for v in reversed(order):
        entry = grads.pop(v, None)
        if entry is None:
            continue
        if isinstance(v, Node):
            _pass_on(session, v, entry[0], grads, retain_graph)
        else:
            _accumulate_leaf(session, v, *entry)
        del entry   # the cotangent goes as soon as it has been passed on
    if not retain_graph:
        for v in order:
            if isinstance(v, Node):
                v.free()   # nodes no gradient reached


def _pass_on(session, node: Node, g, grads: dict, retain_graph: bool) -> None:
    """Run `node`'s rule on its cotangent g and add each input's gradient to `grads`."""
    if CAPTURE.recording:
        note_vjp(node.op)
    outs = tuple(node.vjp(g))
    parts = [o if isinstance(o, Part) else None for o in outs]
    if any(parts):
        outs = tuple(o.g if isinstance(o, Part) else o for o in outs)
    # A gradient is the tape's own unless it shares memory with g, a saved value or another
    # gradient of this call (add's rule returns g twice, reshape's a view of g).
    cotangents = [a for a in g if a is not None] if isinstance(g, Parts) else [g]
    taken = [_block(a) for a in cotangents] + [_block(a) for a in node.kept()]
    blocks = [None if gi is None else _block(gi) for gi in outs]
    if not retain_graph:
        node.free()
    for i, (edge, shape, gi) in enumerate(zip(node.inputs, node.shapes, outs)):
        if gi is None or edge is None:
            continue
        part = parts[i]
        if part is not None:
            shape = shape[1:]
        gi = AnyBuffer.validate(gi, shape, f"gradient of `{node.op}` input").reshape(shape)
        mine = blocks[i]
        owned = all(mine is not b for b in taken) and \
            all(mine is not b for j, b in enumerate(blocks) if j != i)
        prev = grads.get(edge)
        if part is not None:   # one part of a split output's cotangent
            have = list(prev[0]) if prev is not None else [None] * part.count
            slot = have[part.index]
            have[part.index] = gi if slot is None else _add(session, slot, gi)
            grads[edge] = (Parts(have), False)   # a node's cotangent: ownership is not read
            continue
        grads[edge] = (gi, owned) if prev is None else (_add(session, prev[0], gi), True)


def _block(x):
    """The allocation x's values live in: CuPy's memory object, NumPy's base array."""
    if type(x).__module__.startswith("cupy"):
        return x.data.mem
    while getattr(x, "base", None) is not None:
        x = x.base
    return x


def _add(session, a, b):
    """Gradients accumulate through the plan's add capsule, so they obey its numerical policy
    (CuPy's own elementwise kernels are compiled with -ftz=true and would flush subnormals)."""
    from engine.types import BackendOp
    kernel = session.kernel_for(BackendOp.add)
    session.dispatched.setdefault(BackendOp.add, kernel.capsule)
    if CAPTURE.recording:
        note_op(BackendOp.add, kernel.capsule.name)
    return kernel.handler.forward(a, b)


def _accumulate_leaf(session, t, g, owned: bool) -> None:
    """t.grad += g; a first gradient the tape owns becomes t.grad as it is (a copy otherwise, so
    no leaf's .grad shares memory with another's, a seed or a saved value)."""
    from engine.tensor import Tensor
    if not t.requires_grad:
        return
    g = g.reshape(t.shape)
    if t.grad is None:
        total = g if owned else g.copy()
    else:
        total = _add(session, t.grad.view(), g)
    t.grad = Tensor(AnyBuffer(total.reshape(-1), t.device), t.shape)


def _topological(start) -> list:
    """Nodes and leaf tensors reachable from `start`, each after everything it depends on."""
    order, seen, stack = [], set(), [(start, False)]
    while stack:  # iterative DFS: deep graphs must not hit the recursion limit
        v, done = stack.pop()
        if done:
            order.append(v)
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        stack.append((v, True))
        if isinstance(v, Node):
            stack.extend((e, False) for e in v.inputs if e is not None)
    return order


def _numpy():
    import numpy
    return numpy


def _cupy():
    import cupy
    return cupy
