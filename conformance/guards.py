"""The bad-input suite: for every check a wrapper makes before and after a kernel call, inputs that
must trip it. Each must raise the named error with a message naming the values, launch no kernel,
and leave the session working."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine import ops
from engine.capsule import ExecutableKernel
from engine.errors import (BindingMismatchError, DeviceMismatchError, IndexOutOfRangeError,
                           LayoutError, LengthMismatchError,
                           NoMaintainedProfileError, OutputLengthError, ProviderMismatchError,
                           ParameterTypeError, ParameterValueError, ShapeError,
                           UInt32OverflowError, UnknownDeviceError)
from engine.runtime.buffer import AnyBuffer
from engine.session import Session, use_session
from engine.tensor import Tensor
from engine.types import BackendOp as Op, Device

BIG = 2**32


@dataclass
class GuardCase:
    name: str
    check: str                      # the wrapper check it must trip (DESIGN.md's list)
    call: Callable[[Session], object]
    error: type
    message: str                    # regex the message must match: it names the values
    launches_allowed: int = 0       # kernels the setup runs legitimately before the bad step


@dataclass
class GuardOutcome:
    name: str
    check: str
    passed: bool
    raised: str
    message: str
    launches: int
    problem: str = ""


@dataclass
class GuardReport:
    device: str
    outcomes: list[GuardOutcome] = field(default_factory=list)
    known_op_ok: bool = False

    @property
    def tried(self) -> int:
        return len(self.outcomes)

    @property
    def rejected(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def passed(self) -> bool:
        return self.known_op_ok and self.rejected == self.tried and self.tried > 0

    def to_record(self) -> dict:
        return {"suite": "guards", "device": self.device, "passed": self.passed,
                "tried": self.tried, "rejected": self.rejected, "known_op_ok": self.known_op_ok,
                "outcomes": [dataclasses.asdict(o) for o in self.outcomes]}


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


def _t(s: Session, shape, fill=1.0) -> Tensor:
    data = s.xp.full(int(np.prod(shape)), fill, dtype=s.xp.float32)
    return Tensor(AnyBuffer(data, s.device), tuple(shape))


def _other_device(s: Session) -> Device:
    return Device.cuda if s.device is Device.cpu else Device.cpu


def _foreign(s: Session, shape) -> Tensor:
    return Tensor(AnyBuffer(np.ones(int(np.prod(shape)), np.float32), _other_device(s)), shape)


def _short(s: Session, shape) -> Tensor:
    t = _t(s, shape)
    t.buffer = AnyBuffer(t.buffer.data[:-1], s.device)     # a buffer that lost one element
    return t


def _strided(s: Session, shape) -> Tensor:
    n = int(np.prod(shape))
    t = _t(s, shape)
    t.buffer = AnyBuffer(s.xp.ones(2 * n, dtype=s.xp.float32)[::2], s.device)
    return t


def _huge(s: Session) -> Tensor:
    return Tensor(_LyingBuffer(s.xp.ones(1, dtype=s.xp.float32), s.device, BIG), (BIG,))


_UNARY = {
    "abs": lambda a: ops.abs(a), "sqrt": lambda a: ops.sqrt(a), "relu": lambda a: ops.relu(a),
    "gelu": lambda a: ops.gelu(a), "sigmoid": lambda a: ops.sigmoid(a),
    "tanh": lambda a: ops.tanh(a), "softplus": lambda a: ops.softplus(a),
    "exp": lambda a: ops.exp(a), "log": lambda a: ops.log(a), "sin": lambda a: ops.sin(a),
    "cos": lambda a: ops.cos(a), "inv": lambda a: ops.inv(a),
    "scale": lambda a: ops.scale(a, 2.0), "clamp": lambda a: ops.clamp(a, 0.0, 1.0),
    "safe_log": lambda a: ops.safe_log(a), "softmax": lambda a: ops.softmax(a),
    "log_softmax": lambda a: ops.log_softmax(a), "reduce_sum": lambda a: ops.reduce_sum(a),
    "reduce_mean": lambda a: ops.reduce_mean(a),
}
_BINARY = {"add": ops.add, "sub": ops.sub, "mul": ops.mul, "max": ops.max, "min": ops.min,
           "mse_loss": ops.mse_loss}


def _per_op_cases() -> list[GuardCase]:
    cases = []
    for name, fn in _UNARY.items():
        cases += [
            GuardCase(f"{name}: input on the other device", "session targets the device",
                      lambda s, fn=fn: fn(_foreign(s, (3,))), DeviceMismatchError,
                      r"input 0 lives on `\w+` but the session runs on `\w+`"),
            GuardCase(f"{name}: flat length off by one", "flat lengths match logical shapes",
                      lambda s, fn=fn: fn(_short(s, (2, 3))), LengthMismatchError,
                      r"input 0 buffer holds 5 elements but its shape \(2, 3\) needs 6"),
            GuardCase(f"{name}: strided buffer", "strides contiguous",
                      lambda s, fn=fn: fn(_strided(s, (4,))), LayoutError,
                      r"not one contiguous float32 run \(ndim 1, strides \(8,\)"),
            GuardCase(f"{name}: extent 2^32", "every axis fits UInt32",
                      lambda s, fn=fn: fn(_huge(s)), UInt32OverflowError,
                      r"axis 0 has extent 4294967296, over the UInt32 limit 4294967295"),
        ]
    for name, fn in _BINARY.items():
        cases += [
            GuardCase(f"{name}: operand shapes differ", "supported op dimensions",
                      lambda s, fn=fn: fn(_t(s, (2, 3)), _t(s, (3, 2))), ShapeError,
                      r"\(2, 3\) .*\(3, 2\)"),
            GuardCase(f"{name}: second operand on the other device", "session targets the device",
                      lambda s, fn=fn: fn(_t(s, (3,)), _foreign(s, (3,))), DeviceMismatchError,
                      r"input 1 lives on"),
            GuardCase(f"{name}: second operand off by one", "flat lengths match logical shapes",
                      lambda s, fn=fn: fn(_t(s, (2, 3)), _short(s, (2, 3))), LengthMismatchError,
                      r"input 1 buffer holds 5 elements"),
        ]
    return cases


def _param_cases() -> list[GuardCase]:
    S, I, U, L = ShapeError, IndexOutOfRangeError, UInt32OverflowError, LengthMismatchError
    PT, PV = ParameterTypeError, ParameterValueError
    m = lambda s: _t(s, (2, 3))  # noqa: E731
    return [
        GuardCase("reduce_sum: axis 2 of rank 2", "axes in range",
                  lambda s: ops.reduce_sum(m(s), axes=(2,)), S, r"axis 2 is out of range for rank 2"),
        GuardCase("reduce_mean: axis -3 of rank 2", "axes in range",
                  lambda s: ops.reduce_mean(m(s), axes=(-3,)), S, r"axis -3 is out of range"),
        GuardCase("reduce_sum: repeated axis", "axes in range",
                  lambda s: ops.reduce_sum(m(s), axes=(0, -2)), S, r"axes \(0, -2\) repeat an axis"),
        GuardCase("softmax: axis 3", "axes in range",
                  lambda s: ops.softmax(m(s), axis=3), S, r"axis 3 is out of range for rank 2"),
        GuardCase("softmax: rank 0", "supported rank",
                  lambda s: ops.softmax(_t(s, ())), S, r"needs rank >= 1, got a rank-0"),
        GuardCase("log_softmax: rank 0", "supported rank",
                  lambda s: ops.log_softmax(_t(s, ())), S, r"needs rank >= 1"),
        GuardCase("hard_masked_softmax: float mask", "supported op dimensions",
                  lambda s: ops.hard_masked_softmax(m(s), np.ones((2, 3))), S,
                  r"mask must be boolean, got dtype float64"),
        GuardCase("hard_masked_softmax: mask shape", "supported op dimensions",
                  lambda s: ops.hard_masked_softmax(m(s), np.ones((3, 2), bool)), S,
                  r"mask shape \(3, 2\) differs from scores shape \(2, 3\)"),
        GuardCase("reshape: element count", "flat lengths match logical shapes",
                  lambda s: ops.reshape(m(s), (4, 2)), S, r"cannot view 6 elements .* as \(4, 2\)"),
        GuardCase("reshape: negative extent", "supported op dimensions",
                  lambda s: ops.reshape(m(s), (-2, -3)), S, r"shape \(-2, -3\) has a negative"),
        GuardCase("reshape: extent 2^32", "every axis fits UInt32",
                  lambda s: ops.reshape(m(s), (BIG, 0)), U, r"axis 0 has extent 4294967296"),
        GuardCase("permute: repeated axis", "supported op dimensions",
                  lambda s: ops.permute(m(s), (0, 0)), S, r"\(0, 0\) is not a permutation"),
        GuardCase("permute: wrong rank", "supported rank",
                  lambda s: ops.permute(m(s), (0, 1, 2)), S, r"\(0, 1, 2\) is not a permutation of"
                                                             r" range\(2\)"),
        GuardCase("broadcast: incompatible", "supported op dimensions",
                  lambda s: ops.broadcast(m(s), (3, 3)), S, r"\(2, 3\) does not broadcast to \(3, 3\)"),
        GuardCase("broadcast: rank shrinks", "supported rank",
                  lambda s: ops.broadcast(m(s), (6,)), S, r"does not broadcast to \(6,\)"),
        GuardCase("broadcast: extent 2^32", "every axis fits UInt32",
                  lambda s: ops.broadcast(_t(s, (1,)), (BIG,)), U, r"extent 4294967296"),
        GuardCase("broadcast: count 2^32", "element count fits UInt32",
                  lambda s: ops.broadcast(_t(s, (1, 1)), (2**16, 2**16)), U,
                  r"holds 4294967296 elements"),
        GuardCase("concat: no tensors", "supported op dimensions",
                  lambda s: ops.concat([], axis=0), S, r"needs at least one tensor"),
        GuardCase("concat: mismatched axis", "supported op dimensions",
                  lambda s: ops.concat([m(s), _t(s, (3, 3))], axis=1), S,
                  r"tensor 1 has shape \(3, 3\), incompatible with \(2, 3\) along axis 1"),
        GuardCase("concat: axis out of range", "axes in range",
                  lambda s: ops.concat([m(s)], axis=2), S, r"axis 2 is out of range"),
        GuardCase("concat: rank 0", "supported rank",
                  lambda s: ops.concat([_t(s, ())], axis=0), S, r"rank-0 tensors cannot"),
        GuardCase("slice: stop past extent", "indices in range",
                  lambda s: ops.slice(m(s), 1, 1, 4), S, r"\[1, 4\) is not a range within \[0, 3\]"),
        GuardCase("slice: start after stop", "indices in range",
                  lambda s: ops.slice(m(s), 0, 2, 1), S, r"\[2, 1\) is not a range"),
        GuardCase("slice: axis out of range", "axes in range",
                  lambda s: ops.slice(m(s), 5, 0, 1), S, r"axis 5 is out of range"),
        GuardCase("gather: index = extent", "indices in range",
                  lambda s: ops.gather(m(s), 1, [0, 3]), I, r"index 3 is outside \[0, 3\)"),
        GuardCase("gather: negative index", "indices in range",
                  lambda s: ops.gather(m(s), 0, [-1]), I, r"index -1 is outside \[0, 2\)"),
        GuardCase("gather: index 2^32", "indices fit UInt32",
                  lambda s: ops.gather(m(s), 0, [BIG]), I, r"index 4294967296 is outside"),
        GuardCase("gather: 2-D indices", "supported rank",
                  lambda s: ops.gather(m(s), 0, [[0]]), S, r"1-D sequence of ints, got dtype int64 "
                                                          r"with shape \(1, 1\)"),
        GuardCase("gather: float indices", "supported op dimensions",
                  lambda s: ops.gather(m(s), 0, [0.5]), S, r"got dtype float64"),
        GuardCase("gather: axis out of range", "axes in range",
                  lambda s: ops.gather(m(s), 2, [0]), S, r"axis 2 is out of range"),
        GuardCase("scatter_add: src shape", "supported op dimensions",
                  lambda s: ops.scatter_add(m(s), m(s), 0, [1]), S,
                  r"src shape \(2, 3\) should be \(1, 3\)"),
        GuardCase("scatter_add: index out of range", "indices in range",
                  lambda s: ops.scatter_add(m(s), _t(s, (1, 3)), 0, [2]), I,
                  r"index 2 is outside \[0, 2\)"),
        GuardCase("matmul: rank 4", "supported rank",
                  lambda s: ops.matmul(_t(s, (1, 1, 2, 2)), _t(s, (1, 1, 2, 2))), S,
                  r"two rank-2 or two rank-3 tensors, got shapes \(1, 1, 2, 2\)"),
        GuardCase("matmul: inner extents", "supported op dimensions",
                  lambda s: ops.matmul(m(s), m(s)), S, r"inner extents differ: \(2, 3\) @ \(2, 3\)"),
        GuardCase("matmul: batch extents", "supported op dimensions",
                  lambda s: ops.matmul(_t(s, (2, 2, 2)), _t(s, (3, 2, 2))), S,
                  r"batch extents 2 and 3 differ"),
        GuardCase("matmul: mixed ranks", "supported rank",
                  lambda s: ops.matmul(m(s), _t(s, (1, 3, 2))), S, r"got shapes \(2, 3\) and"),
        GuardCase("linear: weight shape", "supported op dimensions",
                  lambda s: ops.linear(m(s), _t(s, (4, 2)), _t(s, (4,))), S, r"disagree"),
        GuardCase("linear: bias rank", "supported rank",
                  lambda s: ops.linear(m(s), _t(s, (4, 3)), _t(s, (4, 1))), S, r"b \[out\]"),
        GuardCase("layer_norm: gamma shape", "supported op dimensions",
                  lambda s: ops.layer_norm(m(s), _t(s, (2,)), _t(s, (3,))), S,
                  r"gamma \[d\], beta \[d\]; got \(2, 3\), \(2,\), \(3,\)"),
        GuardCase("layer_norm: eps 0", "supported op dimensions",
                  lambda s: ops.layer_norm(m(s), _t(s, (3,)), _t(s, (3,)), eps=0.0), PV,
                  r"eps must be a positive finite number that float32 can hold, got 0.0"),
        GuardCase("batch_norm: rank 1", "supported rank",
                  lambda s: ops.batch_norm(_t(s, (3,)), _t(s, (3,)), _t(s, (3,))), S,
                  r"x \[N, C, ...\]"),
        GuardCase("attention: rank 4", "supported rank",
                  lambda s: ops.scaled_dot_product_attention(*(_t(s, (1, 1, 2, 2)),) * 3), S,
                  r"all be rank 2"),
        GuardCase("attention: key width", "supported op dimensions",
                  lambda s: ops.scaled_dot_product_attention(m(s), _t(s, (2, 4)), m(s)), S,
                  r"disagree"),
        GuardCase("attention: mask shape", "supported op dimensions",
                  lambda s: ops.scaled_dot_product_attention(m(s), m(s), m(s),
                                                             mask=np.ones((3, 3), bool)), S,
                  r"mask must be boolean of shape \(2, 2\)"),
        GuardCase("rand_uniform: count 2^32", "element count fits UInt32",
                  lambda s: ops.rand_uniform((2**16, 2**16), seed=1), U,
                  r"holds 4294967296 elements"),
        GuardCase("rand_uniform: negative seed", "supported op dimensions",
                  lambda s: ops.rand_uniform((2,), seed=-1), PV,
                  r"seed must be a whole number in \[0, 2\^64\), got -1"),
        GuardCase("rand_uniform: bool seed", "supported op dimensions",
                  lambda s: ops.rand_uniform((2,), seed=True), PT,
                  r"seed must be a whole number in \[0, 2\^64\), got bool True"),
        GuardCase("bernoulli_mask: p = 1.5", "supported op dimensions",
                  lambda s: ops.bernoulli_mask((2,), 1.5, seed=1), PV, r"got 1.5"),
        GuardCase("clamp: lo above hi", "supported op dimensions",
                  lambda s: ops.clamp(m(s), 1.0, 0.0), PV, r"lo=1.0 is above hi=0.0"),
        GuardCase("scale: NaN alpha", "supported op dimensions",
                  lambda s: ops.scale(m(s), float("nan")), PV, r"alpha must be a number, got NaN"),
        GuardCase("scale: string alpha", "supported op dimensions",
                  lambda s: ops.scale(m(s), "x"), PT, r"alpha must be a real number, got str 'x'"),
        GuardCase("safe_log: eps 0", "supported op dimensions",
                  lambda s: ops.safe_log(m(s), 0.0), PV, r"eps must be positive, got 0.0"),
        GuardCase("backward: output seed of the wrong length", "output seeds pass AnyBuffer.validate",
                  lambda s: _needs_grad(s).backward(np.ones(5, np.float32)), L,
                  r"output seed: got 5 elements, expected 6", launches_allowed=1),
        GuardCase("backward: supplied gradient of the wrong length",
                  "supplied gradients pass AnyBuffer.validate",
                  lambda s: _bad_vjp_backward(s), L, r"gradient of `exp` input: got 1 elements, "
                                                     r"expected 6", launches_allowed=1),
        GuardCase("native output of the wrong length", "output length checked after the call",
                  lambda s: _bad_output(s, lambda a: a.reshape(-1)[:-1]), OutputLengthError,
                  r"returned 5 elements, expected 6 for shape \(2, 3\); the kernel is wrong",
                  launches_allowed=1),
        GuardCase("native output of the wrong dtype", "output length checked after the call",
                  lambda s: _bad_output(s, lambda a: a.astype(s.xp.float64)), LayoutError,
                  r"returned dtype float64, expected float32", launches_allowed=1),
        GuardCase("capsule for another op", "the capsule implements the op",
                  lambda s: ops.apply(Op.add, (m(s), m(s)), (2, 3),
                                      kernel=s.kernel_for(Op.relu)), ProviderMismatchError,
                  r"asked to run `\w+\.relu` .* selected `\w+\.add`"),
        GuardCase("binding a handler of another op", "the capsule implements the op",
                  lambda s: ExecutableKernel.bind(s.kernel_for(Op.add).capsule,
                                                  s.kernel_for(Op.relu).handler),
                  BindingMismatchError, r"op is `relu` on the handler but `add` on the capsule"),
        GuardCase("session for a device with no profile", "the session targets a maintained device",
                  lambda s: Session("metal"), NoMaintainedProfileError,
                  r"device `metal` has no maintained runtime profile"),
        GuardCase("session for an unknown device", "the session targets a maintained device",
                  lambda s: Session("gpu7"), UnknownDeviceError, r"unknown device `gpu7`; known"),
    ]


def _needs_grad(s: Session) -> Tensor:
    x = _t(s, (2, 3))
    x.requires_grad = True
    return ops.exp(x)


def _bad_vjp_backward(s: Session):
    """A VJP (tape rule or backend) that hands back one element too few."""
    from engine.ops._dispatch import LOCAL_VJP
    kernel = s.kernel_for(Op.exp)
    rule = (lambda inputs, out, g, **params: (g.reshape(-1)[:1],))
    saved = LOCAL_VJP[Op.exp]
    LOCAL_VJP[Op.exp] = rule
    s._kernels[Op.exp] = ExecutableKernel(kernel.capsule,
                                          dataclasses.replace(kernel.handler, vjp=rule))
    try:
        y = _needs_grad(s)
        y.backward(s.xp.ones(y.shape, dtype=s.xp.float32))
    finally:
        LOCAL_VJP[Op.exp] = saved
        s._kernels[Op.exp] = kernel


def _bad_output(s: Session, corrupt):
    kernel = s.kernel_for(Op.relu)
    bad = dataclasses.replace(kernel.handler, forward=lambda a: corrupt(a))
    s._kernels[Op.relu] = ExecutableKernel(kernel.capsule, bad)
    try:
        ops.relu(_t(s, (2, 3)))
    finally:
        s._kernels[Op.relu] = kernel


def guard_cases() -> list[GuardCase]:
    return _per_op_cases() + _param_cases()


class _LaunchCounter:
    """Wraps every planned handler's forward so a guard run can prove no kernel was launched."""

    def __init__(self, session: Session) -> None:
        self.count = 0
        for op in Op:
            try:
                kernel = session.kernel_for(op)
            except Exception:
                continue
            fwd = kernel.handler.forward

            def counted(*a, _fwd=fwd, **k):
                self.count += 1
                return _fwd(*a, **k)
            session._kernels[op] = ExecutableKernel(
                kernel.capsule, dataclasses.replace(kernel.handler, forward=counted))


def run_guards(device: str = "cpu") -> GuardReport:
    session = Session(device)
    counter = _LaunchCounter(session)
    report = GuardReport(device)
    with use_session(session):
        for case in guard_cases():
            before = counter.count
            raised, message, problem = "nothing", "", ""
            try:
                case.call(session)
                problem = "no error was raised"
            except Exception as exc:  # noqa: BLE001 - every outcome is recorded, none escapes
                raised, message = type(exc).__name__, str(exc)
                if not isinstance(exc, case.error):
                    problem = f"raised {raised}, expected {case.error.__name__}"
                elif not re.search(case.message, message):
                    problem = f"message does not match /{case.message}/"
            launches = counter.count - before
            if not problem and launches > case.launches_allowed:
                problem = f"{launches} kernel launch(es) before the error"
            report.outcomes.append(GuardOutcome(case.name, case.check, not problem, raised,
                                                message, launches, problem))
        a = ops.add(_t(session, (2,), 1.5), _t(session, (2,), 2.25)).numpy()
        mm = ops.matmul(_t(session, (2, 3), 1.0), _t(session, (3, 2), 2.0)).numpy()
        report.known_op_ok = bool(np.array_equal(a, [3.75, 3.75]) and
                                  np.array_equal(mm, np.full((2, 2), 6.0)))
    return report
