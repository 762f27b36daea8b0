"""One capsule's campaign: the op's fixed edge set, then N seeded cases per generator class, forward
and VJP against the mpmath references; fixed-order and repeatability checks; inputs compared bit
for bit after every call; allocations poisoned so unwritten outputs show; error statistics, the
size distribution, and at least one shrunk counterexample per failure reason.

An exception in the harness's own code (a reference, a bound, a comparison, the shrinker) is a
harness error: recorded apart, with its traceback, and never the kernel's verdict."""
from __future__ import annotations

import time
import traceback
from dataclasses import asdict, dataclass, field

import numpy as np

from conformance import generators, order_claims, orders, error_models
from conformance.failures import Failure, failures_from
from conformance.generators import Case
from conformance.isolation.kernel_side import Returned, describe_returned
from conformance.kernel_call import KernelRaised, call_forward, call_vjp, poison_mask
from conformance.references.memo import get as get_reference
from conformance.peers.accuracy import merge as merge_accuracy
from conformance.peers.classify import differences_record
from conformance.references._common import ReferenceInputError
from conformance.stats import Stats
from conformance.vjp import HarnessStepError, VJPOutcome, check_gradients, identity_check, \
    vjp_callable
from engine.capsule import KernelCapsule, KernelHandler
from engine.float32 import FLT_MAX
from engine.types import Reduction

RAISED = "raised"
SHAPE_MISMATCH = "shape-mismatch"
ORDER_MISMATCH = "order-mismatch"
UNCHECKED_ORDER_CLAIM = "unchecked-order-claim"   # a fixed order no program replays (orders.py)
NOT_REPEATABLE = "not-repeatable"
PARAM_NOT_ROUNDED = "param-not-rounded"
HARNESS_ERRORS_KEPT = 10
QUICK_SIBLING_ELEMENTS = 4096      # a quick campaign judges the siblings of edge cases this small
CASE, SIBLING, PRIMER = "case", "sibling", "primer"     # the kinds of a campaign plan's entries
SIZE_BUCKETS = ((0, 0, "0"), (1, 1, "1"), (2, 31, "2-31"), (32, 1023, "32-1023"),
                (1024, 65535, "1024-65535"), (65536, 1048575, "65536-1048575"),
                (1048576, None, ">=1048576"))


@dataclass(frozen=True)
class Settings:
    """What a campaign runs; equal settings (and fingerprint) let a resumed run reuse a record."""
    cases: int = 8                 # cases per seeded generator class (the edge set is fixed)
    seed: int = 0
    quick: bool = False
    identity_cases: int = 2        # cases per campaign that also run the inner-product identity
    counterexamples: int = 3       # shrunk cases kept beyond the one per failure reason
    shrink_budget: int = 60        # predicate evaluations per shrink
    deterministic_reductions: bool = False   # the engine's mode the kernels ran under
    poison: bool = True            # allocations filled with signalling-NaN bits before each call
    harness: str = ""              # conformance/ source digest: who judged

    @classmethod
    def for_run(cls, cases: int | None, seed: int, quick: bool) -> "Settings":
        from conformance.fingerprint import harness_digest
        from engine.runtime.deterministic import get_deterministic_reductions
        common = {"seed": seed, "deterministic_reductions": bool(get_deterministic_reductions()),
                  "harness": harness_digest()}
        if quick:
            return cls(cases=cases or 2, quick=True, identity_cases=1, counterexamples=1,
                       shrink_budget=30, **common)
        return cls(cases=cases or 8, **common)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class CaseResult:
    failures: list[Failure] = field(default_factory=list)
    skipped: str = ""                       # why the case could not be judged (reference refused)
    harness_error: dict | None = None       # the harness's own code raised: not judged
    fwd: error_models.Verdict | None = None
    fwd_model: error_models.ErrorModel | None = None
    vjp: VJPOutcome | None = None
    repeatable: bool | None = None
    order_checked: bool = False
    terms: int = 0                          # the most terms one output element sums
    oracle_slow: int = 0                    # forward elements the oracle's fast path left to mpmath
    differences: dict = field(default_factory=dict)   # peer clause -> elements it explained
    undocumented: dict = field(default_factory=dict)  # "value"/"grad" -> peer accuracy figure

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def reasons(self) -> set[str]:
        return {f.reason for f in self.failures}


def _whole(reason: str, message: str, output: str = "value",
           kernel_frames: list[str] | None = None) -> Failure:
    return Failure(output=output, element=[], reason=reason, expected="", expected_value="",
                   got=message, got_value="", exact="", error="", bound=None, ulps="", inputs={},
                   kernel_frames=kernel_frames)


def _harness_error(where: str, exc: BaseException) -> dict:
    tail = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {"where": where, "error": f"{type(exc).__name__}: {exc}"[:500],
            "traceback": "".join(tail)[-1500:]}


def _returned(out) -> str:
    """What a kernel returned, in words, for a result that is not a float32 array (a kernel
    process describes a non-array result as a Returned)."""
    return out.description if isinstance(out, Returned) else describe_returned(out)


def check_case(capsule: KernelCapsule, handler: KernelHandler, case: Case, models: dict,
               identity_rng=None, repeat: bool = True, poison: bool = True,
               contract=None) -> CaseResult:
    """Judge one case: forward value, fixed order, repeatability, VJP, and (with identity_rng) the
    inner-product identity. `models` caches the capsule's ErrorModels across cases. A peer's
    `contract` (conformance/peers/contract.py) turns failing elements that hold the peer's own
    conventional value into differences (conformance/peers/classify.py)."""
    res = CaseResult()
    try:
        _judge(capsule, handler, case, models, identity_rng, repeat, poison, res, contract)
    except HarnessStepError as exc:
        res.harness_error = _harness_error(exc.where, exc.exc)
    return res


def _step(where: str, fn, *args, **kwargs):
    """Run one piece of the harness; its exception becomes a HarnessStepError."""
    try:
        return fn(*args, **kwargs)
    except ReferenceInputError:
        raise
    except Exception as exc:
        raise HarnessStepError(where, exc) from exc


def _explainer(contract, capsule, case, out, g, res):
    """explain(verdict, got, grad, exact) for check_gradients and the forward: the peer's
    conventions first, then the accuracy it does not document (conformance/peers/accuracy.py),
    counted into res; what is left fails, a defect against the peer's own contract. A peer whose
    policy flushes subnormals reads them as zero in its rules too (DAZ)."""
    from conformance.peers import accuracy, operand_scale
    from conformance.peers.classify import explain
    from conformance.peers.contract import ConventionCase
    daz = capsule.numerical_policy.subnormals.label == "flush-to-zero"

    def run(verdict, got, grad=None, exact=None):
        output = "value" if grad is None else "grad"
        cc = ConventionCase(tuple(case.inputs), case.params, out, g, grad, daz)
        seen = explain(contract, output, cc, got, verdict)
        for name, n in seen.items():
            res.differences[name] = res.differences.get(name, 0) + n
        scale = None if grad is not None else operand_scale.scale(capsule.op.label, case)
        figure = None if exact is None else accuracy.settle(contract, output, verdict, got, exact,
                                                            scale)
        if figure is not None:
            accuracy.merge(res.undocumented.setdefault(output, {}), figure)
    return run


def _judge(capsule, handler, case, models, identity_rng, repeat, poison, res,
           contract=None) -> None:
    reference = get_reference(capsule.op.label)
    try:
        ref = _step("reference", reference.forward, case.inputs, **case.params)
    except ReferenceInputError as exc:
        res.skipped = f"reference refused the case: {exc}"
        return
    declined = handler.declines(case.inputs, case.params) if handler.declines else None
    if declined:
        res.skipped = f"outside the capsule's declared support: {declined}"
        return
    res.terms = _max_terms(ref)
    res.oracle_slow = int(getattr(ref, "slow_elements", 0) or 0)
    try:
        out, mutated = call_forward(handler, capsule.device, case.inputs, case.params, poison,
                                    case.offsets)
    except KernelRaised as exc:  # a kernel that raises on valid input is a finding
        res.failures.append(_whole(RAISED, str(exc), kernel_frames=exc.frames))
        return
    res.failures += mutated
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != ref.value.shape:
        reason = SHAPE_MISMATCH if isinstance(out, np.ndarray) and out.dtype == np.float32 \
            else "wrong-type"
        res.failures.append(_whole(reason, f"returned {_returned(out)}, expected a float32 array "
                                           f"of shape {list(ref.value.shape)}"))
        return
    out = np.array(out, dtype=np.float32, order="C")   # ascontiguousarray would make 0-d 1-d
    res.fwd, res.fwd_model = _step("compare", _compare_forward, capsule, reference, case, out,
                                   ref, models, poison)
    if contract is not None:
        _step("peer contract", _explainer(contract, capsule, case, out, None, res), res.fwd, out,
              exact=ref.exact)
    res.failures += _step("compare", failures_from, res.fwd, ref, out, "value", capsule.op,
                          case.inputs, case.params)
    _step("order", _check_order, capsule, case, out, res)
    if repeat:
        _check_repeat(capsule, handler, case, out, res, poison)
        _check_params_rounded(capsule, handler, case, out, res, poison)
    vjp_fn = vjp_callable(capsule, handler)
    if vjp_fn is None:
        return
    if case.cotangent is None:
        case.cotangent = generators.cotangent_for(capsule.op, case.seed, case.cls, case.index,
                                                  out.shape)
    g = case.cotangent
    try:
        grads, mutated = call_vjp(vjp_fn, capsule.device, case.inputs, out, g, case.params,
                                  poison, case.offsets)
    except KernelRaised as exc:  # the capsule's VJP raised: a finding, not a harness error
        res.vjp = VJPOutcome(failures=[_whole("vjp-raised", str(exc), "grad", exc.frames)])
        res.failures += res.vjp.failures
        return
    res.vjp = check_gradients(capsule, grads, reference, case, out, ref, g, models,
                              poison_mask if poison else None,
                              None if contract is None else _explainer(contract, capsule, case, out, g,
                                                                   res))
    res.vjp.failures += mutated
    res.failures += res.vjp.failures
    if identity_rng is not None and not res.vjp.failures:
        status, detail = _step("identity", identity_check, reference, case, res.vjp.checks, g,
                               identity_rng)
        res.vjp.identity, res.vjp.identity_detail = status, detail
        if status == "failed":
            res.failures.append(Failure(
                output="grad", element=[], reason="vjp-identity", expected=str(detail["lhs"]),
                expected_value=detail["lhs"], got=str(detail["rhs"]), got_value=detail["rhs"],
                exact=detail["lhs"], error=detail["difference"], bound=detail["tolerance"],
                ulps="", inputs={}))


def _compare_forward(capsule, reference, case, out, ref, models, poison):
    model = models.setdefault(("fwd", ref.kind), error_models.forward_model(capsule, ref.kind))
    ctx = error_models.BoundContext(capsule.op, case.inputs, case.params, capsule.numerical_policy,
                              out=out, fwd_ref=ref)
    verdict = error_models.compare(model, ref, out, ctx)
    if not verdict.passed and model.flush_allowed:
        _accept_flushed_inputs(reference, case, out, model, ctx, verdict)
    if poison:
        error_models.mark_poison(verdict, poison_mask(out))
    return verdict, model


def _max_terms(ref) -> int:
    if ref.terms is None:
        return 1 if np.size(ref.value) else 0
    t = np.asarray(ref.terms)
    return int(t.max()) if t.size else 0


def _accept_flushed_inputs(reference, case, out, model, ctx, verdict) -> None:
    """Under a policy that lets subnormals be flushed, an input may be read as zero too (DAZ):
    elements that fail against the reference but pass against the reference of the inputs with
    subnormals flushed to same-signed zeros are accepted, and counted as observed."""
    flushed = tuple(error_models.daz(x) for x in case.inputs)
    if all(np.array_equal(a, b) for a, b in zip(flushed, case.inputs)):
        return
    try:
        daz_ref = reference.forward(flushed, **case.params)
    except ReferenceInputError:
        return
    again = error_models.compare(model, daz_ref, out, ctx)
    verdict.observed["inputs_flushed"] = error_models.rescue(verdict, again)


def _check_order(capsule, case, out, res: CaseResult) -> None:
    unchecked = order_claims.unchecked_claim(capsule.op, capsule.numerical_policy)
    if unchecked:   # the capsule's declaration, not this case: every case carries it
        res.failures.append(_whole(UNCHECKED_ORDER_CLAIM, unchecked))
        return
    allowed = order_claims.ordered_results(capsule.op, capsule.numerical_policy, case.inputs, case.params)
    if allowed is None:
        return
    res.order_checked = True
    bad = orders.order_mismatch(out, allowed)
    if np.any(bad):
        idx = np.argwhere(bad)[0] if bad.ndim else []
        first = np.asarray(allowed[0], np.float32).reshape(np.shape(out))
        res.failures.append(Failure(
            output="value", element=[int(i) for i in idx], reason=ORDER_MISMATCH,
            expected=f"{float(first[tuple(idx)])!r}", expected_value=float(first[tuple(idx)]),
            got=f"{float(out[tuple(idx)])!r}", got_value=float(out[tuple(idx)]), exact="",
            error=f"{int(np.count_nonzero(bad))} element(s) differ from the "
                  f"{capsule.numerical_policy.reduction.label} order", bound=None, ulps="",
            inputs={}))


def _check_repeat(capsule, handler, case, out, res: CaseResult, poison: bool) -> None:
    try:
        again, _ = call_forward(handler, capsule.device, case.inputs, case.params, poison,
                                case.offsets)
    except KernelRaised:   # raising only the second time: the repeat check cannot judge
        return
    same = (isinstance(again, np.ndarray) and again.shape == out.shape and
            np.array_equal(np.asarray(again, np.float32).view(np.uint32), out.view(np.uint32)))
    res.repeatable = bool(same)
    fixed = capsule.numerical_policy.reduction in (Reduction.fixed_left, Reduction.fixed_tree)
    if not same and fixed:
        res.failures.append(_whole(
            NOT_REPEATABLE, f"two runs of the same case differ bitwise under the declared "
                            f"{capsule.numerical_policy.reduction.label} order"))


def float32_params(params: dict) -> tuple[dict, list[str]]:
    """The params with every float that is not a float32 value rounded to float32, and the names
    of those floats (bools, ints, arrays and floats past float32's range are left alone)."""
    rounded, names = dict(params), []
    for name, value in params.items():
        if isinstance(value, (float, np.floating)) and np.isfinite(value) and \
                abs(float(value)) <= FLT_MAX:
            as_f32 = float(np.float32(value))
            if as_f32 != float(value):
                rounded[name] = as_f32
                names.append(name)
    return rounded, names


def _check_params_rounded(capsule, handler, case, out, res: CaseResult, poison: bool) -> None:
    """docs/OPS.md: float parameters are rounded to float32 before use, so a kernel must give the
    same bits for a parameter and for its float32 rounding. Where the case passes a float that
    is not a float32 value and two runs of the kernel agree bitwise, a third run with the
    parameters rounded must agree too: a difference is a kernel that used the unrounded value
    (an attention scaled by the float64 1/sqrt(d)), which no error bound can see."""
    rounded, names = float32_params(case.params)
    if not names or res.repeatable is not True:
        return
    try:
        again, _ = call_forward(handler, capsule.device, case.inputs, rounded, poison)
    except KernelRaised:   # raising only on the rounded parameters: the check cannot judge
        return
    same = (isinstance(again, np.ndarray) and again.shape == out.shape and
            np.array_equal(np.asarray(again, np.float32).view(np.uint32), out.view(np.uint32)))
    if not same:
        given = ", ".join(f"{n}={case.params[n]!r} (float32 {rounded[n]!r})" for n in names)
        res.failures.append(_whole(
            PARAM_NOT_ROUNDED, f"the output changed when {given} was passed rounded to "
                               "float32: docs/OPS.md rounds float parameters to float32 before "
                               "use, so the kernel must give the same bits for both; round the "
                               "parameter to float32 before using it"))


# --- the campaign ------------------------------------------------------------------------------

class _Sizes:
    """The size distribution of the cases run: by input elements, and the largest reductions."""

    def __init__(self) -> None:
        self.buckets = {label: 0 for _, _, label in SIZE_BUCKETS}
        self.max_elements = self.max_terms = self.total = 0

    def add(self, elements: int, terms: int) -> None:
        for lo, hi, label in SIZE_BUCKETS:
            if elements >= lo and (hi is None or elements <= hi):
                self.buckets[label] += 1
                break
        self.max_elements = max(self.max_elements, elements)
        self.max_terms = max(self.max_terms, terms)
        self.total += elements

    def to_json(self) -> dict:
        return {"buckets": self.buckets, "max_elements": self.max_elements,
                "max_terms": self.max_terms, "elements_total": self.total}


def case_elements(case: Case) -> int:
    return int(sum(np.size(x) for x in case.inputs))


def run_campaign(capsule: KernelCapsule, handler: KernelHandler, settings: Settings,
                 on_case=None, shrink_to=None, only: tuple[str, ...] | None = None,
                 contract=None) -> dict:
    """Run the edge set and every generator class; returns the campaign part of the evidence
    record. `on_case(done, total)` reports progress; `shrink_to(case, result, reasons) -> dict`
    shrinks and writes a counterexample (see conformance.worker). `only` restricts the classes
    (the harness's own tests repeat the seeded classes over many seeds without re-running the
    fixed edge set each time); such a record is incomplete and earns nothing. A peer's
    `contract` makes the record's `differences` (conformance/peers/classify.py)."""
    missing = unsupported(capsule.op)
    if missing:
        return {"status": "unsupported", "message": missing, "settings": settings.to_json()}
    op = capsule.op
    classes = tuple(c for c in generators.classes_for(op) if only is None or c in only)
    plan = campaign_plan(op, classes, settings)
    stats, sizes = Stats(), _Sizes()
    models: dict = {}
    counterexamples, reasons, skip_notes, harness_errors = [], {}, [], []
    covered: set[str] = set()
    extra_left = settings.counterexamples
    by_class = {c: {"run": 0, "failed": 0, "skipped": 0, "harness_errors": 0} for c in classes}
    identity = {"passed": 0, "failed": 0, "skipped-nonsmooth": 0, "not-run": 0}
    identity_left = settings.identity_cases
    oracle_slow = 0
    differences: dict[str, dict] = {}
    undocumented: dict[str, dict] = {}      # peer accuracy it does not document, by output
    t0 = time.perf_counter()
    previous = None
    for done, (cls, i, kind) in enumerate(plan, start=1):
        if kind == PRIMER:
            primed = generators.draw_sibling(op, settings.seed, cls, i)
            error = _prime(capsule, handler, primed, settings.poison)
            if error is not None:
                by_class[cls]["harness_errors"] += 1
                if len(harness_errors) < HARNESS_ERRORS_KEPT:
                    harness_errors.append({"class": cls, "index": i, "case": describe(primed),
                                           **error})
            if on_case is not None:
                on_case(done, len(plan))
            continue
        if kind == SIBLING:   # right after its case: the kernel's last call had these shapes
            case, rng = _sibling_of(previous, settings.seed), None
        else:
            case = previous = generators.draw_case(op, settings.seed, cls, i)
            rng = (generators.identity_rng(op, settings.seed, cls, i)
                   if identity_left > 0 and cls in ("normal", "shapes") else None)
        res = check_case(capsule, handler, case, models, identity_rng=rng,
                         repeat=kind == CASE, poison=settings.poison, contract=contract)
        for name, n in res.differences.items():
            seen = differences.setdefault(name, {"cases": 0, "elements": 0})
            seen["cases"] += 1
            seen["elements"] += n
        for output, figure in res.undocumented.items():
            seen = undocumented.setdefault(output, {"cases": 0})
            seen["cases"] += 1
            merge_accuracy(seen, figure)
        entry = by_class[cls]
        if res.harness_error is not None:
            entry["harness_errors"] += 1
            if len(harness_errors) < HARNESS_ERRORS_KEPT:
                harness_errors.append({"class": cls, "index": i, "case": describe(case),
                                       **res.harness_error})
        elif res.skipped:
            entry["skipped"] += 1
            if len(skip_notes) < 5 and res.skipped not in skip_notes:
                skip_notes.append(f"{cls}[{i}]: {res.skipped[:300]}")
        else:
            entry["run"] += 1
            stats.add(res)
            sizes.add(case_elements(case), res.terms)
            oracle_slow += res.oracle_slow
        if res.vjp is not None and rng is not None and res.harness_error is None:
            identity[res.vjp.identity] = identity.get(res.vjp.identity, 0) + 1
            if res.vjp.identity in ("passed", "failed"):
                identity_left -= 1
        if res.failed:
            entry["failed"] += 1
            new = res.reasons() - covered
            for r in sorted(res.reasons()):   # a set's order varies with the hash seed
                reasons[r] = reasons.get(r, 0) + 1
            if new or extra_left > 0:
                if not new:
                    extra_left -= 1
                counterexamples.append(_counterexample(case, res, new or res.reasons(),
                                                       shrink_to, harness_errors))
                covered |= res.reasons()
        if on_case is not None:
            on_case(done, len(plan))
    seconds = time.perf_counter() - t0
    run = sum(e["run"] for e in by_class.values())
    failed = sum(e["failed"] for e in by_class.values())
    n_harness = sum(e["harness_errors"] for e in by_class.values())
    fwd_models = {k[1]: m.to_json() for k, m in models.items() if isinstance(k, tuple)}
    vjp_models = {k: m.to_json() for k, m in models.items() if isinstance(k, str)}
    status = "failed" if failed else "harness-error" if n_harness else "passed"
    peer = {} if contract is None else \
        {"differences": differences_record(contract, differences, undocumented)}
    return {
        **peer,
        "status": status,
        "message": (f"{n_harness} case(s) could not be judged: the harness raised (a harness "
                    "defect, not a kernel verdict)") if n_harness else None,
        "settings": settings.to_json(),
        "error_model": {"forward": fwd_models, "vjp": vjp_models},
        "cases": {"total": run, "failed": failed,
                  "skipped": sum(e["skipped"] for e in by_class.values()),
                  "harness_errors": n_harness, "by_class": by_class,
                  "skipped_notes": skip_notes, "sizes": sizes.to_json()},
        "harness_errors": harness_errors,
        "stats": stats.to_json(),
        "observed": {**stats.observed(capsule), "oracle_slow_elements": oracle_slow,
                     "order_claim": order_claims.claim_check(capsule.op, capsule.numerical_policy)},
        "identity": identity,
        "vjp_checked": capsule.op.needs_vjp and stats.vjp_cases > 0,
        "failure_reasons": reasons,
        "counterexamples": counterexamples,
        "timing": {"seconds": round(seconds, 3),
                   "cases_per_second": round(run / seconds, 2) if seconds > 0 else None,
                   "elements_per_second": round(sizes.total / seconds) if seconds > 0 else None},
    }


def campaign_plan(op, classes: tuple[str, ...], settings: Settings) -> list[tuple[str, int, str]]:
    """(class, index, kind) in the order the campaign runs them: each class's cases in turn, and
    for each case a second call at its shapes with new values, judged in full (forward, order,
    VJP). The case's own repeat (identical inputs) cannot tell a kernel that keeps part of an
    earlier call's result (an output or gradients cached by shape, a workspace partly rewritten)
    from a correct one; a call that meets a shape the kernel has just seen, with other values,
    can. The new values are the case's sibling (generators.draw_sibling: the same shapes,
    params and offsets), in one of two orders:

    - CASE then SIBLING: the case is judged (with its repeat), then the sibling (no repeat, no
      identity). Both calls at the shape are judged; this is every case of a full campaign.
    - PRIMER then CASE: the kernel runs on the sibling's values first, forward and VJP, unjudged,
      then the case is judged as usual: no second reference to compute. A quick campaign does
      this for every case but the edge cases up to QUICK_SIBLING_ELEMENTS input elements (cheap
      to judge twice): judging a second value set would cost it as much again (the large edge
      cases, the seeded cases of the attention ops), and what it gives up is a judged first
      call at those shapes (a kernel wrong only the first time it meets a shape), which the
      full campaign keeps."""
    plan = []
    for cls in classes:
        for i in range(generators.class_size(op, cls, settings.cases)):
            if settings.quick and not (cls == generators.EDGES and generators.edge_elements(
                    op, i) <= QUICK_SIBLING_ELEMENTS):
                plan += [(cls, i, PRIMER), (cls, i, CASE)]
            else:
                plan += [(cls, i, CASE), (cls, i, SIBLING)]
    return plan


def _prime(capsule, handler, primed: Case, poison: bool) -> dict | None:
    """Call the kernel, and its VJP, on a sibling's values without judging them: the case judged
    next meets a shape the kernel has just seen with other values. A kernel that raises here is
    left to the judged call; a harness error comes back (as check_case's `harness_error`)."""
    try:
        out, _ = call_forward(handler, capsule.device, primed.inputs, primed.params, poison,
                              primed.offsets)
        vjp_fn = vjp_callable(capsule, handler)
        if vjp_fn is None or not isinstance(out, np.ndarray) or out.dtype != np.float32:
            return None
        out = np.array(out, dtype=np.float32, order="C")
        g = generators.sibling_cotangent(primed.op, primed.seed, primed.cls, primed.index,
                                         out.shape)
        call_vjp(vjp_fn, capsule.device, primed.inputs, out, g, primed.params, poison,
                 primed.offsets)
    except KernelRaised:
        return None
    except HarnessStepError as exc:
        return _harness_error(exc.where, exc.exc)
    return None


def _sibling_of(case: Case, seed: int) -> Case:
    """The sibling of `case`, just judged; its cotangent has the case's shape (the case's output
    shape) and its own stream, so a VJP cached by shape meets a new one too."""
    sibling = generators.draw_sibling(case.op, seed, case.cls, case.index)
    if case.cotangent is not None:
        sibling.cotangent = generators.sibling_cotangent(case.op, seed, case.cls, case.index,
                                                         case.cotangent.shape)
    return sibling


def _counterexample(case: Case, res: CaseResult, focus: set[str], shrink_to, harness_errors):
    """A counterexample for `focus` (the reasons it stands for), shrunk when a shrinker is given."""
    ce = {"case": describe(case), "reasons": sorted(focus),
          "failures": [f.to_json() for f in first_per_reason(res.failures, focus)]}
    if shrink_to is not None:
        try:
            ce.update(shrink_to(case, res, focus))
        except Exception as exc:   # the shrinker is harness code: keep the unshrunk case
            err = _harness_error("shrink", exc)
            ce["shrink_error"] = err["error"]
            if len(harness_errors) < HARNESS_ERRORS_KEPT:
                harness_errors.append({"class": case.cls, "index": case.index,
                                       "case": describe(case), **err})
    return ce


def first_per_reason(failures: list[Failure], focus: set[str]) -> list[Failure]:
    """The focused reasons' failures first, one per reason, then the others; at most five."""
    seen, first, rest = set(), [], []
    for f in failures:
        if f.reason in focus and f.reason not in seen:
            seen.add(f.reason)
            first.append(f)
        else:
            rest.append(f)
    return (first + rest)[:5]


def unsupported(op) -> str | None:
    """Why this op cannot be fuzzed yet (no generator or no reference), or None."""
    from conformance.plugins import UserOp
    from conformance.references import known
    if isinstance(op, UserOp) and op not in generators.OP_SPECS:
        return (f"user op `{op.label}` has no record: pass its contract, --op-contracts "
                "module:attr (docs/PLUGINS.md, \"Ops the engine does not have\")")
    if op not in generators.OP_SPECS or not known(op.label):
        what = "generator" if op not in generators.OP_SPECS else "mpmath reference"
        return (f"no {what} for op `{op.label}` yet: the capsule cannot earn evidence until "
                f"conformance covers it")
    return None


def describe(case: Case) -> dict:
    return {"class": case.cls, "index": case.index, "seed": case.seed, "summary": case.summary(),
            "note": case.note, "elements": case_elements(case)}
