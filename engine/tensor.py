"""Typed tensors: a logical shape over an opaque contiguous float32 buffer."""
from __future__ import annotations

import numpy as np

from engine.errors import DTypeError, LengthMismatchError
from engine.runtime.buffer import AnyBuffer, check_uint32, element_count
from engine.types import Device


class Tensor:
    __slots__ = ("buffer", "shape", "numel", "requires_grad", "node", "grad", "_view",
                 "_checked", "__weakref__")

    def __init__(self, buffer: AnyBuffer, shape: tuple[int, ...], requires_grad: bool = False,
                 node=None, numel: int | None = None, view=None) -> None:
        if numel is None:   # callers on the hot path pass a checked shape and its count
            shape = tuple(int(s) for s in shape)
            numel = element_count(shape)
        if buffer.count != numel:
            raise LengthMismatchError(
                f"tensor buffer holds {buffer.count} elements, expected {numel} for shape "
                f"{tuple(shape)}")
        self.buffer = buffer
        self.shape = shape
        self.numel = numel
        self.requires_grad = requires_grad
        self.node = node          # the tape node that produced this tensor, if any
        self.grad: Tensor | None = None
        # The buffer's data shaped to `shape`, with the flat array it was made for.
        self._view = (buffer.data, view) if view is not None else None
        # The flat array that passed the dispatch path's input checks for this tensor's shape
        # (engine/ops/_dispatch.py): while the buffer holds that array they are not repeated.
        self._checked = None
        # (engine/ops/_dispatch.py's apply makes its results without this method: a slot added
        # here must be set there too.)

    def view(self):
        """The buffer's data shaped to the logical shape: a view, made once per flat array."""
        data = self.buffer.data
        cached = self._view
        if cached is None or cached[0] is not data:
            cached = self._view = (data, data if data.shape == self.shape
                                   else data.reshape(self.shape))
        return cached[1]

    @property
    def device(self) -> Device:
        return self.buffer.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.numel

    def numpy(self) -> np.ndarray:
        data = self.buffer.data
        host = data.get() if hasattr(data, "get") else np.array(data, copy=True)
        return host.reshape(self.shape)

    def __array__(self, dtype=None, copy=None):
        """np.asarray(t): a host float32 copy of the values (a device tensor is copied down)."""
        host = self.numpy()
        return host if dtype is None else host.astype(dtype)

    def item(self) -> float:
        if self.size != 1:
            raise LengthMismatchError(f"item() needs one element, the tensor has {self.size}")
        return float(self.numpy().reshape(()))

    def backward(self, seed=None, retain_graph: bool = False) -> None:
        """PyTorch's convention: a tensor of one element may omit the seed; any other needs a
        seed of exactly its shape. The graph is freed afterwards unless retain_graph=True, and a
        second backward through a freed graph raises."""
        from engine.autograd import backward
        backward(self, seed, retain_graph)

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
    """A tensor on the current session's device from nested lists, scalars or a NumPy array.

    Conversions, all explicit: booleans become 0.0 and 1.0; integers and float64 values are
    rounded to the nearest float32 (ties to even: integers are exact up to 2^24 in magnitude,
    2^24 + 1 becomes 2^24); infinities and NaN stay what they are. A finite value whose
    magnitude rounds beyond the float32 range is a Float32OverflowError, never a silent inf.
    Complex numbers, strings, objects and integers beyond int64/uint64 are a DTypeError."""
    from engine.errors import Float32OverflowError, ParameterTypeError
    from engine.session import current_session
    if not isinstance(requires_grad, bool):
        raise ParameterTypeError(f"tensor(): requires_grad must be True or False, got "
                                 f"{type(requires_grad).__name__} {requires_grad!r}")
    session = session or current_session()
    if isinstance(data, Tensor):
        data = data.numpy()
    try:
        host = np.asarray(data)
    except (ValueError, TypeError) as exc:
        raise DTypeError(f"tensor() takes real numbers in a rectangular nesting, got "
                         f"{type(data).__name__} ({exc})") from None
    if host.dtype.kind not in "fiub":
        raise DTypeError(f"tensor() takes real numbers, got dtype {host.dtype}")
    wide = host.astype(np.float64) if host.dtype.kind in "iub" else host
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = wide.astype(np.float32)
    overflow = np.isinf(f32) & np.isfinite(wide)
    if np.any(overflow):
        bad = float(wide[overflow].reshape(-1)[0])
        raise Float32OverflowError(
            f"tensor(): {bad!r} is finite but beyond the float32 range (|x| < 3.4028235e38); "
            "scale the data, or pass inf explicitly if infinity is meant")
    check_uint32(f32.shape, "tensor()")
    return Tensor(session.upload(f32), f32.shape, requires_grad)
