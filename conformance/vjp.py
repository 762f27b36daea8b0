"""Gradient checks: each VJP output against the mpmath VJP reference under the capsule's VJP error
model, and the inner-product identity <v, J u> = <VJP(v), u> against a high-precision JVP.

The JVP: u is a perturbation of 2^7 float32 ulps per input element (a relative step near 2^-16),
chosen so x +- u and x +- u/2 are float32 values the references take exactly. J u comes from the
forward reference's exact (float64) values by central differences with one Richardson step,
(4 D(u/2) - D(u)) / 3, whose truncation error is O(|u|^5). Where D(u) and D(u/2) disagree beyond
2^-20 relative the function has a kink within the step (relu, max ties, clamp bounds) and the
identity is not applicable to that case: it is recorded as skipped, never as passed.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

import engine.ops  # noqa: F401 - registers the local VJP rules (LOCAL_VJP)
from conformance import error_models
from conformance.failures import Failure, failures_from
from conformance.references._common import ReferenceInputError
from engine.capsule import ExecutableKernel, KernelCapsule, KernelHandler
from engine.ops._dispatch import vjp_function
from engine.types import VJPMode

F32 = np.float32
VJP_IDENTITY = "vjp-identity"
VJP_SHAPE = "vjp-shape-mismatch"
VJP_RAISED = "vjp-raised"


def vjp_callable(capsule: KernelCapsule, handler: KernelHandler):
    """The VJP that owns this capsule's gradients (backend or local tape rule), or None. For a
    capsule whose kernels run in a kernel process, the stand-in that calls it there."""
    stand_in = getattr(handler, "vjp_stand_in", None)   # a RemoteHandler (isolation/remote.py)
    if stand_in is not None:
        return stand_in(capsule)
    if not capsule.op.needs_vjp or capsule.vjp_mode is VJPMode.none:
        return None
    if capsule.vjp_mode is VJPMode.backend_vjp and handler.vjp is None:
        return None
    return vjp_function(ExecutableKernel(capsule, handler))


@dataclass
class GradCheck:
    """One gradient output's comparison."""
    index: int
    model: error_models.ErrorModel
    verdict: error_models.Verdict | None
    ref: object = None
    got: np.ndarray | None = None


@dataclass
class VJPOutcome:
    checks: list[GradCheck] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    identity: str = "not-run"       # passed | failed | skipped-nonsmooth | not-run
    identity_detail: dict = field(default_factory=dict)


class HarnessStepError(Exception):
    """The harness's own code raised while judging a case: never the kernel's verdict."""

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(f"{where}: {type(exc).__name__}: {exc}")
        self.where, self.exc = where, exc


def check_gradients(capsule, grads, reference, case, out, fwd_ref, g, models,
                    poison_mask=None, explain=None) -> VJPOutcome:
    """Compare each gradient the capsule's VJP returned (`grads`, host arrays) with the
    reference under the capsule's VJP error model. `models` caches ErrorModels by reference kind;
    `poison_mask(array)` marks elements that still hold the allocator's poison; `explain(verdict,
    got, i, exact)` passes the elements a peer's contract explains (conformance/peers/classify.py)
    or leaves to accuracy the peer does not document (accuracy.py)."""
    res = VJPOutcome()
    try:
        refs = reference.vjp(case.inputs, g, **case.params)
    except Exception as exc:
        raise HarnessStepError("vjp-reference", exc) from exc
    daz_refs = _DazRefs(reference, case, g)
    grads = tuple(grads) if isinstance(grads, (tuple, list)) else (grads,)
    for i, ref in enumerate(refs):
        if ref is None:
            continue
        got = grads[i] if i < len(grads) else None
        got = None if got is None else np.asarray(_host(got))
        if got is None or got.shape != ref.value.shape or got.dtype != np.float32:
            desc = "missing" if got is None else f"{got.dtype}{list(got.shape)}"
            res.failures.append(_whole_failure(
                VJP_SHAPE, f"grad[{i}] is {desc}, expected float32{list(ref.value.shape)}",
                output=f"grad[{i}]"))
            continue
        try:
            model = models.setdefault(ref.kind, error_models.vjp_model(capsule, ref.kind))
            ctx = error_models.BoundContext(capsule.op, case.inputs, case.params,
                                            error_models.vjp_bound_policy(capsule), out=out,
                                            fwd_ref=fwd_ref, g=g, input_index=i)
            verdict = error_models.compare(model, ref, got, ctx)
            if not verdict.passed and model.flush_allowed:
                daz_ref = daz_refs.get(i)
                if daz_ref is not None:
                    again = error_models.compare(model, daz_ref, got, ctx)
                    verdict.observed["inputs_flushed"] = error_models.rescue(verdict, again)
            if poison_mask is not None:
                error_models.mark_poison(verdict, poison_mask(got))
            if explain is not None:
                explain(verdict, got, i, ref.exact)
            found = failures_from(verdict, ref, got, f"grad[{i}]", capsule.op, case.inputs,
                                  case.params, grad_of=i)
        except Exception as exc:
            raise HarnessStepError("vjp-compare", exc) from exc
        res.checks.append(GradCheck(i, model, verdict, ref, got))
        for f in found:
            f.reason = "vjp-" + f.reason
            res.failures.append(f)
    return res


class _DazRefs:
    """The VJP reference of the inputs and cotangent with subnormals read as same-signed zeros,
    computed once on first need: under a policy that lets subnormals be flushed, a kernel may
    read them so (the forward's acceptance in campaign.py, here for gradients: a relu VJP that
    reads a subnormal input as 0 returns 0 where the reference passes g through). None where
    nothing is subnormal or the reference refuses the flushed inputs."""

    def __init__(self, reference, case, g) -> None:
        self.reference, self.case, self.g = reference, case, g
        self.refs: tuple | None = None
        self.done = False

    def get(self, i: int):
        if not self.done:
            self.done = True
            inputs = tuple(error_models.daz(x) for x in self.case.inputs)
            g = error_models.daz(self.g)
            if any(not np.array_equal(a, b) for a, b in zip(inputs + (g,),
                                                              self.case.inputs + (self.g,))):
                try:
                    self.refs = tuple(self.reference.vjp(inputs, g, **self.case.params))
                except ReferenceInputError:
                    self.refs = None
        return None if self.refs is None or i >= len(self.refs) else self.refs[i]


def _host(x):
    return x.get() if hasattr(x, "get") else x


def _whole_failure(reason: str, message: str, output: str = "grad") -> Failure:
    return Failure(output=output, element=[], reason=reason, expected="", expected_value="",
                   got=message, got_value="", exact="", error="", bound=None, ulps="", inputs={})


# --- the inner-product identity -------------------------------------------------------------------

def _perturbation(x: np.ndarray, rng) -> np.ndarray:
    """2^7 ulps of each finite element with a random sign, zero where x +- u would not be exact."""
    from conformance.rounding import ulp_array
    x64 = x.astype(np.float64)
    step = np.ldexp(ulp_array(np.where(np.abs(x64) > 2.0 ** -100, x64, 2.0 ** -100)), 7)
    u = step * rng.choice([-1.0, 1.0], size=x.shape)
    with np.errstate(all="ignore"):
        ok = np.isfinite(x64)
        for s in (1.0, -1.0, 0.5, -0.5):
            y = x64 + s * u
            ok &= np.isfinite(y) & (y.astype(F32).astype(np.float64) == y)
    return np.where(ok, u, 0.0)


def identity_check(reference, case, checks: list[GradCheck], g: np.ndarray, rng) -> tuple[str, dict]:
    """<g, J u> (Richardson central differences of the forward reference) against
    sum_i <grad_i, u_i>; tolerance from the per-element VJP bounds and the difference's error."""
    if not checks:
        return "not-run", {}
    us = [np.zeros(x.shape) for x in case.inputs]
    for c in checks:
        us[c.index] = _perturbation(case.inputs[c.index], rng)
    if not any(np.any(u) for u in us):
        return "not-run", {}

    def f(scale):
        xs = tuple((x.astype(np.float64) + scale * u).astype(F32) for x, u in zip(case.inputs, us))
        return np.asarray(reference.forward(xs, **case.params).exact, dtype=np.float64)

    fp, fm, fph, fmh = f(1.0), f(-1.0), f(0.5), f(-0.5)
    with np.errstate(all="ignore"):
        d1 = (fp - fm) / 2
        d2 = fph - fmh
        jvp = (4 * d2 - d1) / 3
        noise = 2.0 ** -52 * (np.abs(fp) + np.abs(fm) + 4 * (np.abs(fph) + np.abs(fmh)))
    if not (np.all(np.isfinite(jvp))):
        return "not-run", {"why": "non-finite forward values near the case"}
    kink = np.abs(d1 - d2) > 2.0 ** -20 * (np.abs(d1) + np.abs(d2)) + 4 * noise
    if np.any(kink & (g != 0)):
        return "skipped-nonsmooth", {"elements": int(np.count_nonzero(kink))}
    g64 = np.asarray(g, dtype=np.float64)
    lhs = math.fsum((g64 * jvp).reshape(-1).tolist())
    rhs_terms, tol_terms = [], []
    for c in checks:
        u = us[c.index]
        rhs_terms.extend((c.got.astype(np.float64) * u).reshape(-1).tolist())
        b = c.verdict.bound
        if np.all(np.isnan(b)):   # equality models: half an ulp of the rounded reference
            from conformance.rounding import ulp_array
            b = np.where(c.model.kind == "bitwise", 0.0,
                         0.5 * ulp_array(np.asarray(c.ref.value, np.float64)))
        tol_terms.extend((np.abs(u) * np.nan_to_num(b, nan=0.0)).reshape(-1).tolist())
    rhs = math.fsum(rhs_terms)
    fd_err = float(np.sum(np.abs(g64) * (np.abs(d1 - d2) / 3 + noise)))
    tol = math.fsum(tol_terms) + fd_err + 2.0 ** -50 * (abs(lhs) + abs(rhs))
    detail = {"lhs": lhs, "rhs": rhs, "difference": abs(lhs - rhs), "tolerance": tol}
    return ("passed" if abs(lhs - rhs) <= tol else "failed"), detail
