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
        """The values as torch shows them (NumPy's summary, `...`, past 1000 elements), then the
        shape and the device: `tensor([1., 2.], shape=(2,), device=cpu)`."""
        from engine.errors import TorchLeanError
        try:
            values = np.array2string(self.numpy(), separator=", ", prefix="tensor(",
                                     threshold=1000, edgeitems=3, precision=8,
                                     floatmode="maxprec")
        except TorchLeanError as exc:   # a read back the runtime refuses (inside a CUDA capture)
            values = f"<values not readable now: {exc}>"
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"tensor({values}, shape={self.shape}, device={self.device.label}{grad})"

    def __len__(self) -> int:
        """The first dimension, as torch's len(); a 0-d tensor has none."""
        if not self.shape:
            from engine.errors import NoLengthError
            raise NoLengthError("len() of a 0-d tensor: it has no first dimension; use "
                                "t.item() for its value or t.numel for its element count")
        return self.shape[0]

    def __iter__(self):
        """The sub-tensors along the first dimension, as t[0], t[1], ...; not of a 0-d tensor."""
        len(self)
        return (self[i] for i in range(self.shape[0]))

    def __bool__(self) -> bool:
        """torch's rule: a tensor of one element is true when its value is not 0 (NaN is true);
        any other is ambiguous. (Without it, __len__ would decide: a 0-d tensor would raise, an
        empty one be false.)"""
        if self.numel != 1:
            from engine.errors import AmbiguousTruthError
            raise AmbiguousTruthError(
                f"the truth value of a tensor of shape {self.shape} ({self.numel} elements) is "
                "ambiguous; use t.item() on a one-element tensor, or np.asarray(t).any() / "
                ".all()")
        return self.item() != 0

    def __getitem__(self, key) -> "Tensor":
        """t[i], t[i, j], t[a:b], t[:, i], t[..., i]: integers and slices of step 1, through the
        slice and reshape ops (differentiable, no copy kernels of their own)."""
        return _basic_index(self, key)

    # Operators insert explicit broadcast nodes so the backend report shows them. An operand
    # that is no Tensor and no real number gives NotImplemented, so that Python raises its
    # TypeError "unsupported operand type(s)" (as torch does; `t * 'x'` was NumPy's ValueError
    # and `t + None` a tensor of NaN).
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


def _basic_index(t: Tensor, key) -> Tensor:
    """t[key] for integers, slices of step 1 and one Ellipsis: one slice op per narrowed axis,
    then one reshape that drops the integer-indexed axes."""
    from engine import ops
    from engine.errors import IndexOutOfRangeError, TensorIndexError
    keys = key if isinstance(key, tuple) else (key,)
    where = f"t[{', '.join(map(_index_text, keys))}]"
    if not t.shape:
        raise TensorIndexError(f"{where}: a 0-d tensor has no axis to index; use t.item()")
    if sum(k is Ellipsis for k in keys) > 1:
        raise TensorIndexError(f"{where}: at most one Ellipsis (...) per index")
    if Ellipsis in keys:
        at = keys.index(Ellipsis)
        keys = keys[:at] + (slice(None),) * (t.ndim - len(keys) + 1) + keys[at + 1:]
    if len(keys) > t.ndim:
        raise TensorIndexError(f"{where}: {len(keys)} indices for a tensor of shape "
                               f"{t.shape}; pass at most {t.ndim}")
    out, kept = t, []
    for axis, (k, extent) in enumerate(zip(keys, t.shape)):
        if isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_)):
            if not -extent <= k < extent:
                raise IndexOutOfRangeError(f"{where}: index {k} is out of range for axis "
                                           f"{axis} of extent {extent}; pass an index in "
                                           f"[{-extent}, {extent - 1}]")
            start = int(k) % extent
            out = ops.slice(out, axis, start, start + 1)
        elif isinstance(k, slice):
            try:
                start, stop, step = k.indices(extent)
            except TypeError:   # a bound that is no integer (1.5, a tensor)
                step = None
            if step != 1:
                raise TensorIndexError(f"{where}: a slice takes integer bounds and step 1 "
                                       "only; pick other entries with ops.gather(t, axis, "
                                       "indices)")
            if (start, stop) != (0, extent):
                out = ops.slice(out, axis, start, max(start, stop))
            kept.append(axis)
        else:
            raise TensorIndexError(
                f"{where}: an index is an int, a slice of step 1 or `...`, got "
                f"{type(k).__name__} {k!r}; pick several entries with ops.gather(t, axis, "
                "indices), add an axis with ops.reshape")
    kept += range(len(keys), t.ndim)    # the axes no index reached
    shape = tuple(out.shape[a] for a in kept)
    return out if shape == out.shape else ops.reshape(out, shape)


def _index_text(k) -> str:
    """One index as it is written between brackets: 1, 0:2, ::2, ..."""
    if k is Ellipsis:
        return "..."
    if isinstance(k, slice):
        text = ":".join("" if v is None else str(v) for v in (k.start, k.stop))
        return text if k.step is None else f"{text}:{k.step}"
    return repr(k)


def is_operand(value) -> bool:
    """What arithmetic takes beside a Tensor: a Tensor, a real number (bool, int, float, a NumPy
    real scalar) or a NumPy array of real numbers."""
    if isinstance(value, (Tensor, bool, int, float, np.bool_, np.integer, np.floating)):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "biuf"


def _binary(name: str, a, b):
    if not (is_operand(a) and is_operand(b)):
        return NotImplemented
    from engine import ops
    a, b = ops.broadcast_pair(a, b)
    return getattr(ops, name)(a, b)


def tensor(data, requires_grad: bool = False, session=None) -> Tensor:
    """A tensor on the current session's device from nested lists, scalars or a NumPy array.

    Conversions, all explicit: booleans become 0.0 and 1.0; integers and float64 values are
    rounded to the nearest float32 (ties to even: integers are exact up to 2^24 in magnitude,
    2^24 + 1 becomes 2^24); infinities and NaN stay what they are. A finite value whose
    magnitude rounds beyond the float32 range is a Float32OverflowError, never a silent inf.
    Complex numbers, strings and objects are a DTypeError; an integer beyond int64/uint64
    (2**70) an IntegerRangeError (pass float(x) if its float32 rounding is meant), or a
    Float32OverflowError when it is beyond the float32 range too."""
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
    if host.dtype.kind == "O":
        _refuse_wide_integers(host)
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


# The least magnitude that rounds to infinity in float32: halfway from FLT_MAX to 2^128 (the tie
# goes to the even 2^128).
_F32_OVERFLOW = 2 ** 128 - 2 ** 103


def _refuse_wide_integers(host: np.ndarray) -> None:
    """Raise for the first Python int NumPy could not store (beyond int64/uint64: it made an
    object array, which tensor() reported as "got dtype object")."""
    from engine.errors import Float32OverflowError, IntegerRangeError
    for value in host.reshape(-1):
        if not isinstance(value, int) or isinstance(value, bool) or -2 ** 63 <= value < 2 ** 64:
            continue
        if abs(value) >= _F32_OVERFLOW:
            raise Float32OverflowError(
                f"tensor(): the integer {value} is beyond the float32 range (|x| < 3.4028235e38); "
                "scale the data, or pass inf explicitly if infinity is meant")
        raise IntegerRangeError(
            f"tensor(): the integer {value} is beyond the int64/uint64 range (-2^63 to 2^64-1) "
            f"that tensor() converts; pass float(x) ({float(np.float32(float(value))):.8g} in "
            "float32) if its rounding is meant")
