"""Typed tensors: a logical shape over an opaque contiguous float32 buffer."""
from __future__ import annotations

import numpy as np

from engine.errors import DTypeError, LengthMismatchError
from engine.runtime.buffer import AnyBuffer, check_uint32, element_count
from engine.types import Device


class Tensor:
    __slots__ = ("buffer", "shape", "requires_grad", "node", "grad", "__weakref__")

    def __init__(self, buffer: AnyBuffer, shape: tuple[int, ...], requires_grad: bool = False,
                 node=None) -> None:
        shape = tuple(int(s) for s in shape)
        if buffer.count != element_count(shape):
            raise LengthMismatchError(
                f"tensor buffer holds {buffer.count} elements, expected {element_count(shape)} "
                f"for shape {shape}")
        self.buffer = buffer
        self.shape = shape
        self.requires_grad = requires_grad
        self.node = node          # the tape node that produced this tensor, if any
        self.grad: Tensor | None = None

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.buffer.count

    def array(self):
        """The data as an array of the logical shape, on the tensor's device (a view)."""
        return self.buffer.data.reshape(self.shape)

    def numpy(self) -> np.ndarray:
        data = self.buffer.data
        host = data.get() if hasattr(data, "get") else np.array(data, copy=True)
        return host.reshape(self.shape)

    def item(self) -> float:
        if self.size != 1:
            raise LengthMismatchError(f"item() needs one element, the tensor has {self.size}")
        return float(self.numpy().reshape(()))

    def backward(self, seed=None) -> None:
        from engine.autograd import backward
        backward(self, seed)

    def zero_grad(self) -> None:
        self.grad = None

    def detach(self) -> "Tensor":
        return Tensor(self.buffer, self.shape)

    def __repr__(self) -> str:
        return f"Tensor[shape={self.shape}, device={self.device.label}]"

    # Operators insert explicit broadcast nodes so the backend report shows them.
    def __add__(self, other): return _binary("add", self, other)
    def __radd__(self, other): return _binary("add", other, self)
    def __sub__(self, other): return _binary("sub", self, other)
    def __rsub__(self, other): return _binary("sub", other, self)
    def __mul__(self, other): return _binary("mul", self, other)
    def __rmul__(self, other): return _binary("mul", other, self)
    def __neg__(self):
        from engine import ops
        return ops.scale(self, -1.0)
    def __matmul__(self, other):
        from engine import ops
        return ops.matmul(self, other)


def _binary(name: str, a, b) -> Tensor:
    from engine import ops
    a, b = ops.broadcast_pair(a, b)
    return getattr(ops, name)(a, b)


def tensor(data, requires_grad: bool = False, session=None) -> Tensor:
    """A tensor on the current session's device from nested lists, scalars or a NumPy array."""
    from engine.session import current_session
    session = session or current_session()
    host = np.asarray(data)
    if host.dtype.kind not in "fiub":
        raise DTypeError(f"tensor() takes real numbers, got dtype {host.dtype}")
    host = host.astype(np.float32)
    check_uint32(host.shape, "tensor()")
    return Tensor(session.upload(host), host.shape, requires_grad)
