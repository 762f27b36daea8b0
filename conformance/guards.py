"""The bad-input suite: for every check a wrapper makes before and after a kernel call, inputs that
must trip it. Each must raise the named error with a message naming the values, launch no kernel,
and leave the session working. The checks of one op's inputs and parameters are that op's
`error_inputs` in its record (conformance/families/); the cases here are the ones about no single op (backward seeds, a VJP
or a kernel that returns the wrong length, a capsule bound to another op, sessions)."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from conformance.bad_inputs import filled
from conformance.families import SPECS
from engine import ops
from engine.capsule import ExecutableKernel
from engine.errors import (BindingMismatchError, LayoutError, LengthMismatchError,
                           NoMaintainedProfileError, OutputLengthError, ProviderMismatchError,
                           UnknownDeviceError)
from engine.session import Session, use_session
from engine.tensor import Tensor
from engine.types import BackendOp as Op, RuntimeEntry


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
    # `run --capsule` patterns: only the selected capsules' ops had their cases (and the checks
    # about no single op ran); None: the whole suite ran
    selection: list[str] | None = None

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
                "selection": self.selection,
                "outcomes": [dataclasses.asdict(o) for o in self.outcomes]}


def _per_op_cases(ops=None) -> list[GuardCase]:
    """Every op record's error inputs (of `ops` only, when given), in the order their ranks
    give."""
    inputs = sorted((e for spec in SPECS if ops is None or spec.op in ops
                     for e in spec.error_inputs), key=lambda e: e.rank)
    return [GuardCase(e.name, e.check, e.call, e.error, e.message) for e in inputs]


def _cross_cutting_cases() -> list[GuardCase]:
    """The checks about no single op's inputs: they run after the per-op cases."""
    L = LengthMismatchError
    m = lambda s: filled(s, (2, 3))  # noqa: E731
    return [
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
    x = filled(s, (2, 3))
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
        ops.relu(filled(s, (2, 3)))
    finally:
        s._kernels[Op.relu] = kernel


def guard_cases(ops=None) -> list[GuardCase]:
    """The suite's cases; with `ops`, only those ops' own cases, then the checks about no single
    op (each run needs those: they are not any capsule's)."""
    return _per_op_cases(ops) + _cross_cutting_cases()


def selected_ops(session: Session, patterns: list[str]) -> set:
    """The ops whose capsule in the session (the one a guard case reaches) a pattern names."""
    import fnmatch
    ops = set()
    for op in (*Op, *RuntimeEntry):
        try:
            name = session.kernel_for(op).capsule.name
        except Exception:   # no capsule for this op on this device
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            ops.add(op)
    return ops


class _LaunchCounter:
    """Wraps every planned handler's forward so a guard run can prove no kernel was launched."""

    def __init__(self, session: Session) -> None:
        self.count = 0
        for op in (*Op, *RuntimeEntry):   # the runtime entries' wrappers are guarded too
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


def run_guards(device: str = "cpu", patterns: list[str] | None = None) -> GuardReport:
    """The suite on `device`; with `patterns` (run --capsule), only the selected capsules' ops'
    cases and the cross-cutting ones."""
    session = Session(device)
    counter = _LaunchCounter(session)
    report = GuardReport(device, selection=list(patterns) if patterns else None)
    chosen = selected_ops(session, patterns) if patterns else None
    with use_session(session):
        for case in guard_cases(chosen):
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
        a = ops.add(filled(session, (2,), 1.5), filled(session, (2,), 2.25)).numpy()
        mm = ops.matmul(filled(session, (2, 3), 1.0), filled(session, (3, 2), 2.0)).numpy()
        report.known_op_ok = bool(np.array_equal(a, [3.75, 3.75]) and
                                  np.array_equal(mm, np.full((2, 2), 6.0)))
    return report
