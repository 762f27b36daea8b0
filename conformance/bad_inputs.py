"""Bad inputs for the guard suite: tensors that each trip one wrapper check (on the other device, a
buffer one element short, strided, an extent of 2^32 without allocating it), the `ErrorInput` an
op's record (conformance/families/) lists, and the input checks every unary and every binary op
must make, written once here and instantiated per op by the records."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from engine.errors import (DeviceMismatchError, LayoutError, LengthMismatchError, ShapeError,
                           UInt32OverflowError)
from engine.runtime.buffer import AnyBuffer
from engine.session import Session
from engine.tensor import Tensor
from engine.types import Device

BIG = 2**32

# Sections of the guard suite's list, in order: ErrorInput.rank starts with one of them.
UNARY_INPUTS, BINARY_OPERANDS, PARAMETERS = 0, 1, 2


@dataclass(frozen=True)
class ErrorInput:
    """One call of an op that its wrapper must reject before any kernel runs."""
    # where it stands in the guard suite's list: (section, position...) compared as a tuple; the
    # committed case digest pins that order
    rank: tuple[int, ...]
    # the case's name in the report, e.g. "softmax: axis 3"
    name: str
    # the wrapper check it must trip (DESIGN.md's list)
    check: str
    # the bad call, given the session it runs in
    call: Callable[[Session], object]
    # the error class it must raise
    error: type
    # regex the message must match: it names the values
    message: str


class _LyingBuffer(AnyBuffer):
    """A small buffer that reports another element count: reaches the extent checks without
    allocating 2^32 elements."""
    __slots__ = ("claimed",)

    def __init__(self, data, device, claimed: int) -> None:
        super().__init__(data, device)
        self.claimed = claimed

    @property
    def count(self) -> int:
        return self.claimed


def filled(s: Session, shape, fill=1.0) -> Tensor:
    """A good tensor of `shape` on the session's device."""
    data = s.xp.full(int(np.prod(shape)), fill, dtype=s.xp.float32)
    return Tensor(AnyBuffer(data, s.device), tuple(shape))


def _other_device(s: Session) -> Device:
    return Device.cuda if s.device is Device.cpu else Device.cpu


def foreign(s: Session, shape) -> Tensor:
    """A tensor on the device the session does not run on."""
    return Tensor(AnyBuffer(np.ones(int(np.prod(shape)), np.float32), _other_device(s)), shape)


def short(s: Session, shape) -> Tensor:
    """A tensor whose buffer lost one element."""
    t = filled(s, shape)
    t.buffer = AnyBuffer(t.buffer.data[:-1], s.device)
    return t


def strided(s: Session, shape) -> Tensor:
    """A tensor whose buffer is every other element of a longer one."""
    n = int(np.prod(shape))
    t = filled(s, shape)
    t.buffer = AnyBuffer(s.xp.ones(2 * n, dtype=s.xp.float32)[::2], s.device)
    return t


def huge(s: Session) -> Tensor:
    """A rank-1 tensor of extent 2^32 backed by one element."""
    return Tensor(_LyingBuffer(s.xp.ones(1, dtype=s.xp.float32), s.device, BIG), (BIG,))


def unary_input_errors(position: int, name: str, fn) -> tuple[ErrorInput, ...]:
    """The checks every op makes on its one tensor input, for `fn(a)` (an op call)."""
    rank = (UNARY_INPUTS, position)
    return (
        ErrorInput(rank + (0,), f"{name}: input on the other device", "session targets the device",
                   lambda s: fn(foreign(s, (3,))), DeviceMismatchError,
                   r"input 0 lives on `\w+` but the session runs on `\w+`"),
        ErrorInput(rank + (1,), f"{name}: flat length off by one",
                   "flat lengths match logical shapes", lambda s: fn(short(s, (2, 3))),
                   LengthMismatchError,
                   r"input 0 buffer holds 5 elements but its shape \(2, 3\) needs 6"),
        ErrorInput(rank + (2,), f"{name}: strided buffer", "strides contiguous",
                   lambda s: fn(strided(s, (4,))), LayoutError,
                   r"not one contiguous float32 run \(ndim 1, strides \(8,\)"),
        ErrorInput(rank + (3,), f"{name}: extent 2^32", "every axis fits UInt32",
                   lambda s: fn(huge(s)), UInt32OverflowError,
                   r"axis 0 has extent 4294967296, over the UInt32 limit 4294967295"),
    )


def binary_operand_errors(position: int, name: str, fn) -> tuple[ErrorInput, ...]:
    """The checks every op of two same-shaped tensors makes, for `fn(a, b)`."""
    rank = (BINARY_OPERANDS, position)
    return (
        ErrorInput(rank + (0,), f"{name}: operand shapes differ", "supported op dimensions",
                   lambda s: fn(filled(s, (2, 3)), filled(s, (3, 2))), ShapeError,
                   r"\(2, 3\) .*\(3, 2\)"),
        ErrorInput(rank + (1,), f"{name}: second operand on the other device",
                   "session targets the device",
                   lambda s: fn(filled(s, (3,)), foreign(s, (3,))), DeviceMismatchError,
                   r"input 1 lives on"),
        ErrorInput(rank + (2,), f"{name}: second operand off by one",
                   "flat lengths match logical shapes",
                   lambda s: fn(filled(s, (2, 3)), short(s, (2, 3))), LengthMismatchError,
                   r"input 1 buffer holds 5 elements"),
    )


def lying(s: Session, shape) -> Tensor:
    """A tensor of any `shape` backed by one element (the extent and count checks of ops that
    need a rank, e.g. rfft's (batch, n)), without allocating it."""
    count = int(np.prod(shape, dtype=object))
    return Tensor(_LyingBuffer(s.xp.ones(1, dtype=s.xp.float32), s.device, count), tuple(shape))
def huge_matrix(s: Session, rows: int, cols: int) -> Tensor:
    """A rank-2 tensor of rows x cols elements (each axis within UInt32, the count past it)
    backed by one element."""
    return Tensor(_LyingBuffer(s.xp.ones(1, dtype=s.xp.float32), s.device, rows * cols),
                  (rows, cols))
