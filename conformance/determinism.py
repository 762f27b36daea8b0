"""Repeat-run bitwise audits for every capsule whose reduction order is not fixed (atomics,
implementation-defined or unspecified): K runs on the same inputs in default mode and in
deterministic mode. Deterministic mode must repeat bit for bit, forward and VJP, and stay within
the capsule's error bound of the mpmath reference; default mode's repeatability is recorded."""
from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field

import numpy as np

from conformance.families import SPECS
from engine.runtime.deterministic import set_deterministic_reductions
from engine.session import Session, use_session
from engine.tensor import Tensor
from engine.types import BackendOp as Op, Device, Reduction, RuntimeEntry

_RNG_SEED = 2026


def audit_cases(rng: np.random.Generator) -> dict[Op, tuple[tuple[np.ndarray, ...], dict, tuple]]:
    """op -> (inputs, params, output shape), from each op record's `determinism` case (conformance/families/):
    one index stream the index ops share, then every case in its turn, all from `rng`."""
    indices = rng.integers(0, 256, size=65536)
    specs = sorted((s for s in SPECS if s.determinism), key=lambda s: s.determinism.turn)
    return {s.op: s.determinism.draw(rng, indices) for s in specs}


def audited(capsule) -> bool:
    """A capsule is audited when its reduction order is not promised (implementation-defined,
    unspecified), or when its op accumulates (forward or backward) and the order is not fixed."""
    if capsule.numerical_policy.reduction in (Reduction.implementation_defined,
                                              Reduction.unspecified):
        return True
    return "atomic" in capsule.notes.lower()


@dataclass
class ModeResult:
    runs: int                    # runs in all, the first included
    differing_runs: int          # of the compared runs, those whose forward or VJP bits differ
    max_spread: float            # largest |run_i - run_0| over every output element
    bitwise_identical: bool
    # the runs compared with the first (every run after it): what differing_runs counts among,
    # so `differing_runs of compared_runs` is the one count the console and the report give
    compared_runs: int = field(init=False)

    def __post_init__(self) -> None:
        self.compared_runs = max(self.runs - 1, 0)

    def differ_text(self) -> str:
        """The count in words, as the console prints it: "0 of 3 runs differ from the first"."""
        return f"{self.differing_runs} of {self.compared_runs} runs differ from the first"


@dataclass
class CapsuleDeterminism:
    capsule: str
    op: str
    default: ModeResult
    deterministic: ModeResult
    within_bound: bool
    worst_ratio: float           # worst error / bound of deterministic mode against the reference
    passed: bool
    problems: list[str] = field(default_factory=list)


def _run_once(op: Op, inputs, params, cot, xp):
    from engine.ops._dispatch import apply
    from engine.runtime.device_buffer import to_device, upload
    device = Device.cpu if xp is np else Device.cuda
    tensors = [Tensor(upload(a, device), a.shape, requires_grad=True) for a in inputs]
    dev_params = dict(params)
    if xp is not np:
        for key in ("indices", "mask"):
            if key in params:
                dev_params[key] = to_device(params[key], dtype=None)
    out = apply(op, tuple(tensors), cot.shape, dev_params)
    out.backward(cot)        # a host seed: backward uploads it keeping a rank-0 -0
    return [out.numpy()] + [t.grad.numpy() for t in tensors]


def _mode(op, inputs, params, cot, xp, runs, deterministic) -> tuple[ModeResult, list]:
    previous = set_deterministic_reductions(deterministic)
    try:
        results = [_run_once(op, inputs, params, cot, xp) for _ in range(runs)]
    finally:
        set_deterministic_reductions(previous)
    first = results[0]
    differing, spread = 0, 0.0
    for other in results[1:]:
        same = all(np.array_equal(a.view(np.uint32), b.view(np.uint32))
                   for a, b in zip(first, other))
        differing += not same
        for a, b in zip(first, other):
            with np.errstate(invalid="ignore"):
                d = np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0)
            spread = max(spread, float(d))
    return ModeResult(runs, differing, spread, differing == 0), first


def _reference_check(capsule, op, inputs, params, got) -> tuple[bool, float]:
    from conformance import error_models, references
    ref = references.get(op.label).forward(inputs, **params)
    model = error_models.forward_model(capsule, ref.kind)
    verdict = error_models.compare(model, ref, got, error_models.BoundContext(
        op, inputs, params, capsule.numerical_policy))
    ratio = np.nan_to_num(verdict.ratio, nan=0.0, posinf=np.inf)
    return verdict.passed, float(np.max(ratio, initial=0.0))


def audit_capsule(capsule, runs: int = 8, cases: dict | None = None) -> CapsuleDeterminism:
    """`cases`: audit_cases of the _RNG_SEED stream when the caller drew them already (a run
    draws them once for all its capsules: every draw gives the same arrays), else drawn here;
    this capsule gets its own copy of its case either way (nothing a kernel does to its inputs
    reaches another capsule's audit)."""
    if cases is None:
        cases = audit_cases(np.random.default_rng(_RNG_SEED))
    inputs, params, cot_shape = copy.deepcopy(cases[capsule.op])
    cot = np.random.default_rng(_RNG_SEED + 1).standard_normal(cot_shape).astype(np.float32)
    session = Session(capsule.device)
    if session.kernel_for(capsule.op).capsule.name != capsule.name:
        raise ValueError(f"{capsule.name} is not the capsule the {session.profile.name} profile "
                         "selects; audit it through a session whose plan selects it")
    with use_session(session):
        default, _ = _mode(capsule.op, inputs, params, cot, session.xp, runs, False)
        fixed, first = _mode(capsule.op, inputs, params, cot, session.xp, runs, True)
    ok_bound, worst = _reference_check(capsule, capsule.op, inputs, params, first[0])
    problems = []
    if not fixed.bitwise_identical:
        problems.append(f"deterministic mode differed from run to run: "
                        f"{fixed.differ_text()} (spread {fixed.max_spread:g})")
    if not ok_bound:
        problems.append(f"deterministic result exceeds the error bound (worst ratio {worst:g})")
    return CapsuleDeterminism(capsule.name, capsule.op.label, default, fixed, ok_bound, worst,
                              not problems, problems)


@dataclass
class DeterminismReport:
    device: str
    results: list[CapsuleDeterminism] = field(default_factory=list)
    # `run --capsule` patterns: only the capsules they select were audited; None: every one
    selection: list[str] | None = None

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    def to_record(self) -> dict:
        return {"suite": "determinism", "device": self.device, "passed": self.passed,
                "selection": self.selection, "capsules": [asdict(r) for r in self.results]}


def run_determinism(device: str = "cpu", runs: int = 8, patterns: list[str] | None = None,
                    on_done=None) -> DeterminismReport:
    """Audit every accumulating op's selected capsule, and every other selected capsule whose
    order is not fixed; one of those without a case here fails the report rather than hiding.
    With `patterns` (run --capsule), only the capsules they name. `on_done(done, total, result)`
    is told of each capsule as it ends."""
    import fnmatch
    dev = Device.parse(device)
    session = Session(dev)
    with_cases = {s.op for s in SPECS if s.determinism}
    report = DeterminismReport(dev.label, selection=list(patterns) if patterns else None)
    todo = []
    for op in (*Op, *RuntimeEntry):    # the ops, then the packed FFT entry points
        try:
            capsule = session.kernel_for(op).capsule
        except Exception:   # no capsule for this op on this device: nothing runs, nothing to audit
            continue
        if patterns and not any(fnmatch.fnmatchcase(capsule.name, p) for p in patterns):
            continue
        if op in with_cases or audited(capsule):
            todo.append((op, capsule))
    cases = audit_cases(np.random.default_rng(_RNG_SEED)) if todo else None
    for done, (op, capsule) in enumerate(todo, start=1):
        if op in with_cases:
            report.results.append(audit_capsule(capsule, runs, cases))
        else:
            empty = ModeResult(0, 0, 0.0, False)
            report.results.append(CapsuleDeterminism(
                capsule.name, op.label, empty, empty, False, float("nan"), False,
                [f"{capsule.name} has an unfixed reduction order but no determinism case"]))
        if on_done is not None:
            on_done(done, len(todo), report.results[-1])
    return report
