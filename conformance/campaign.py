"""One capsule's campaign: N cases per generator class, forward and VJP against the mpmath
references, fixed-order and repeatability checks, error statistics, and shrunk counterexamples."""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np

from conformance import generators, orders, policy
from conformance.failures import Failure, failures_from
from conformance.generators import Case
from conformance.references import get as get_reference
from conformance.references._common import ReferenceInputError
from conformance.stats import Stats
from conformance.vjp import VJPOutcome, check_gradients, identity_check, vjp_callable
from engine.capsule import KernelCapsule, KernelHandler
from engine.types import Device, Reduction

RAISED = "raised"
SHAPE_MISMATCH = "shape-mismatch"
ORDER_MISMATCH = "order-mismatch"
NOT_REPEATABLE = "not-repeatable"


@dataclass(frozen=True)
class Settings:
    """What a campaign runs; equal settings (and fingerprint) let a resumed run reuse a record."""
    cases: int = 8                 # cases per generator class
    seed: int = 0
    quick: bool = False
    identity_cases: int = 2        # cases per campaign that also run the inner-product identity
    counterexamples: int = 3       # failing cases shrunk and written as replay files
    shrink_budget: int = 60        # predicate evaluations per shrink

    @classmethod
    def for_run(cls, cases: int | None, seed: int, quick: bool) -> "Settings":
        if quick:
            return cls(cases=cases or 2, seed=seed, quick=True, identity_cases=1,
                       counterexamples=1, shrink_budget=30)
        return cls(cases=cases or 8, seed=seed)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class CaseResult:
    failures: list[Failure] = field(default_factory=list)
    skipped: str = ""                       # why the case could not be judged (reference refused)
    fwd: policy.Verdict | None = None
    fwd_model: policy.ErrorModel | None = None
    vjp: VJPOutcome | None = None
    repeatable: bool | None = None
    order_checked: bool = False

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    def reasons(self) -> set[str]:
        return {f.reason for f in self.failures}


# --- device plumbing: plugin and CUDA kernels take their device's arrays ---------------------

def _xp(device: Device):
    if device is Device.cuda:
        import cupy
        return cupy
    return np


def _to_device(x, xp):
    if xp is np or x is None:
        return x
    if isinstance(x, np.ndarray):
        # Through a flat copy: CuPy fills a rank-0 array with ndarray.fill, which writes +0 for -0.
        return xp.asarray(x.reshape(-1)).reshape(x.shape)
    return x


def _params_to_device(params, xp):
    return {k: _to_device(v, xp) for k, v in params.items()}


def _host(x):
    return x.get() if hasattr(x, "get") else np.asarray(x)


def _whole(reason: str, message: str) -> Failure:
    return Failure(output="value", element=[], reason=reason, expected="", expected_value="",
                   got=message, got_value="", exact="", error="", bound=None, ulps="", inputs={})


def run_forward(capsule: KernelCapsule, handler: KernelHandler, case: Case):
    xp = _xp(capsule.device)
    arrays = tuple(_to_device(x, xp) for x in case.inputs)
    out = handler.forward(*arrays, **_params_to_device(case.params, xp))
    return _host(out)


def check_case(capsule: KernelCapsule, handler: KernelHandler, case: Case, models: dict,
               identity_rng=None, repeat: bool = True) -> CaseResult:
    """Judge one case: forward value, fixed order, repeatability, VJP, and (with identity_rng) the
    inner-product identity. `models` caches the capsule's ErrorModels across cases."""
    res = CaseResult()
    reference = get_reference(capsule.op.label)
    try:
        ref = reference.forward(case.inputs, **case.params)
    except ReferenceInputError as exc:
        res.skipped = f"reference refused the case: {exc}"
        return res
    except Exception as exc:  # a defect of the oracle, not of the capsule: recorded, not judged
        res.skipped = f"reference-error: {type(exc).__name__}: {exc}"
        return res
    try:
        out = run_forward(capsule, handler, case)
    except Exception as exc:  # a kernel that raises on valid input is a finding
        res.failures.append(_whole(RAISED, f"{type(exc).__name__}: {exc}"))
        return res
    if out is None or np.shape(out) != ref.value.shape or np.asarray(out).dtype != np.float32:
        desc = "None" if out is None else f"{np.asarray(out).dtype}{list(np.shape(out))}"
        res.failures.append(_whole(SHAPE_MISMATCH,
                                   f"returned {desc}, expected float32{list(ref.value.shape)}"))
        return res
    out = np.array(out, dtype=np.float32, order="C")   # ascontiguousarray would make 0-d 1-d
    model = models.setdefault(("fwd", ref.kind), policy.forward_model(capsule, ref.kind))
    ctx = policy.BoundContext(capsule.op, case.inputs, case.params, capsule.numerical_policy,
                              out=out, fwd_ref=ref)
    res.fwd, res.fwd_model = policy.compare(model, ref, out, ctx), model
    if not res.fwd.passed and model.flush_allowed:
        _accept_flushed_inputs(reference, case, out, model, ctx, res.fwd)
    res.failures += failures_from(res.fwd, ref, out, "value", capsule.op, case.inputs, case.params)
    _check_order(capsule, case, out, res)
    if repeat:
        _check_repeat(capsule, handler, case, out, res)
    vjp_fn = vjp_callable(capsule, handler)
    if vjp_fn is not None:
        g = generators.cotangent_for(capsule.name, case.seed, case.cls, case.index, out.shape) \
            if case.cotangent is None else case.cotangent
        case.cotangent = g
        res.vjp = _run_vjp(capsule, vjp_fn, reference, case, out, ref, g, models)
        res.failures += res.vjp.failures
        if identity_rng is not None and not res.vjp.failures:
            status, detail = identity_check(reference, case, res.vjp.checks, g, identity_rng)
            res.vjp.identity, res.vjp.identity_detail = status, detail
            if status == "failed":
                res.failures.append(Failure(
                    output="grad", element=[], reason="vjp-identity", expected=str(detail["lhs"]),
                    expected_value=detail["lhs"], got=str(detail["rhs"]), got_value=detail["rhs"],
                    exact=detail["lhs"], error=detail["difference"], bound=detail["tolerance"],
                    ulps="", inputs={}))
    return res


def _accept_flushed_inputs(reference, case, out, model, ctx, verdict) -> None:
    """Under a policy that lets subnormals be flushed, an input may be read as zero too (DAZ):
    elements that fail against the reference but pass against the reference of the inputs with
    subnormals flushed to same-signed zeros are accepted, and counted as observed."""
    flushed = tuple(np.where(policy.subnormal(x), np.copysign(np.float32(0), x), x).astype(
        np.float32) for x in case.inputs)
    if all(np.array_equal(a, b) for a, b in zip(flushed, case.inputs)):
        return
    try:
        daz_ref = reference.forward(flushed, **case.params)
    except Exception:
        return
    again = policy.compare(model, daz_ref, out, ctx)
    rescued = ~verdict.ok & again.ok
    verdict.ok |= rescued
    verdict.reason[rescued] = 0
    verdict.observed["inputs_flushed"] = int(np.count_nonzero(rescued))


def _run_vjp(capsule, vjp_fn, reference, case, out, ref, g, models) -> VJPOutcome:
    xp = _xp(capsule.device)
    if xp is np:
        return check_gradients(capsule, vjp_fn, reference, case, out, ref, g, models)

    def on_device(inputs, output, grad, **params):
        grads = vjp_fn(tuple(_to_device(x, xp) for x in inputs), _to_device(output, xp),
                       _to_device(grad, xp), **_params_to_device(params, xp))
        return tuple(None if x is None else _host(x) for x in grads)
    return check_gradients(capsule, on_device, reference, case, out, ref, g, models)


def _check_order(capsule, case, out, res: CaseResult) -> None:
    allowed = orders.ordered_results(capsule.op, capsule.numerical_policy, case.inputs, case.params)
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


def _check_repeat(capsule, handler, case, out, res: CaseResult) -> None:
    try:
        again = run_forward(capsule, handler, case)
    except Exception:
        return
    same = np.array_equal(np.asarray(again, np.float32).view(np.uint32),
                          out.view(np.uint32)) if np.shape(again) == out.shape else False
    res.repeatable = bool(same)
    fixed = capsule.numerical_policy.reduction in (Reduction.fixed_left, Reduction.fixed_tree)
    if not same and fixed:
        res.failures.append(_whole(
            NOT_REPEATABLE, f"two runs of the same case differ bitwise under the declared "
                            f"{capsule.numerical_policy.reduction.label} order"))


# --- the campaign ------------------------------------------------------------------------------

def run_campaign(capsule: KernelCapsule, handler: KernelHandler, settings: Settings,
                 on_case=None, shrink_to=None) -> dict:
    """Run every generator class; returns the campaign part of the evidence record.
    `on_case(done, total)` reports progress; `shrink_to(case, result) -> dict` shrinks and writes a
    counterexample (see conformance.shrink)."""
    missing = unsupported(capsule.op)
    if missing:
        return {"status": "unsupported", "message": missing, "settings": settings.to_json()}
    classes = generators.classes_for(capsule.op)
    total = len(classes) * settings.cases
    stats = Stats()
    models: dict = {}
    counterexamples, reasons, skip_notes = [], {}, []
    by_class = {c: {"run": 0, "failed": 0, "skipped": 0} for c in classes}
    identity = {"passed": 0, "failed": 0, "skipped-nonsmooth": 0, "not-run": 0}
    identity_left = settings.identity_cases
    t0 = time.perf_counter()
    done = 0
    for cls in classes:
        for i in range(settings.cases):
            case = generators.draw_case(capsule.name, capsule.op, settings.seed, cls, i)
            smooth_class = cls in ("normal", "shapes")
            rng = (generators.case_rng(capsule.name + "#identity", settings.seed, cls, i)
                   if identity_left > 0 and smooth_class else None)
            res = check_case(capsule, handler, case, models, identity_rng=rng)
            done += 1
            entry = by_class[cls]
            if res.skipped:
                entry["skipped"] += 1
                if len(skip_notes) < 5 and res.skipped not in skip_notes:
                    skip_notes.append(f"{cls}[{i}]: {res.skipped[:300]}")
            else:
                entry["run"] += 1
                stats.add(res)
            if res.vjp is not None and rng is not None and not res.skipped:
                identity[res.vjp.identity] = identity.get(res.vjp.identity, 0) + 1
                if res.vjp.identity in ("passed", "failed"):
                    identity_left -= 1
            if res.failed:
                entry["failed"] += 1
                for r in res.reasons():
                    reasons[r] = reasons.get(r, 0) + 1
                if len(counterexamples) < settings.counterexamples:
                    ce = {"case": describe(case), "failures": [f.to_json() for f in res.failures[:5]]}
                    if shrink_to is not None:
                        ce.update(shrink_to(case, res))
                    counterexamples.append(ce)
            if on_case is not None:
                on_case(done, total)
    seconds = time.perf_counter() - t0
    run = sum(e["run"] for e in by_class.values())
    failed = sum(e["failed"] for e in by_class.values())
    fwd_models = {k[1]: m.to_json() for k, m in models.items() if isinstance(k, tuple)}
    vjp_models = {k: m.to_json() for k, m in models.items() if isinstance(k, str)}
    return {
        "status": "failed" if failed else "passed",
        "settings": settings.to_json(),
        "error_model": {"forward": fwd_models, "vjp": vjp_models},
        "cases": {"total": run, "failed": failed,
                  "skipped": sum(e["skipped"] for e in by_class.values()), "by_class": by_class,
                  "skipped_notes": skip_notes},
        "stats": stats.to_json(),
        "observed": stats.observed(capsule),
        "identity": identity,
        "vjp_checked": capsule.op.needs_vjp and stats.vjp_cases > 0,
        "failure_reasons": reasons,
        "counterexamples": counterexamples,
        "timing": {"seconds": round(seconds, 3),
                   "cases_per_second": round(run / seconds, 2) if seconds > 0 else None},
    }


def unsupported(op) -> str | None:
    """Why this op cannot be fuzzed yet (no generator or no reference), or None."""
    from conformance.references import OPS
    if op not in generators.OP_SPECS or op.label not in OPS:
        what = "generator" if op not in generators.OP_SPECS else "mpmath reference"
        return (f"no {what} for op `{op.label}` yet: the capsule cannot earn evidence until "
                f"conformance covers it")
    return None


def describe(case: Case) -> dict:
    return {"class": case.cls, "index": case.index, "seed": case.seed, "summary": case.summary(),
            "note": case.note}
