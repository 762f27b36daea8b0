"""Error models: what a capsule's numerical policy allows for each output element (DESIGN.md, "Evidence
and trust"), and the per-element comparison of a result against its mpmath Reference.

The models, by the Reference's kind and the capsule's policy:

- exact: bit for bit, signed zero included (NaN matches any NaN).
- rounded: under round=nearest-even (or scalar-context, whose default context is nearest-even) the
  result equals the correctly rounded reference. Under directed, implementation-defined or unspecified
  rounding it must be faithful: within 1 ulp of the rounded reference (either neighbour of the exact).
- transcendental / composite: within `value_contract.declared_bound.ulps` ulps of the rounded
  reference, plus `magnitude_units` times u times the reference's magnitude (its sum of |terms|;
  |exact| where the reference gives none), plus its declared `absolute` term, when the capsule
  declares a bound: an output that can cancel carries error relative to its terms, not to its
  value; an intrinsic documented by absolute error (fast-math's __logf, __sinf) declares that.
  Without one, a composite gets the
  derived bound its op's record holds (conformance/families/: float32 evaluation of the docs/OPS.md
  formula, the reasoning beside each formula; error_terms.py states the method), and a transcendental must be correctly rounded: a library function that is not has to
  declare its bound.
- reduction (sums, dot and matrix products): |got - exact| <= gamma_k * sum|terms| + underflow, with
  gamma_k = k u / (1 - k u), u = 2^-24 (Higham, Accuracy and Stability, ch. 3-4) and k from the
  reduction policy for n terms: fixed-left n - 1, fixed-tree ceil(log2 n), implementation-defined
  (and unspecified) n, which covers any order and FMA. Dot products (matmul, linear) round each
  product too, so fixed orders add 1 (n already covers a product). Ops that round once more after the
  sum (reduce_mean's division) add their extra roundings: +1 each.
  Underflow: Higham's model fl(x op y) = (x op y)(1 + d) fails below 2^-126. Under gradual underflow
  an addition whose result is subnormal is exact (Hauser 1996), and a product picks up an absolute
  error of at most 2^-150 (half the subnormal spacing): the bound adds n * 2^-150 for dot products.
  When subnormals may be flushed (flush-to-zero, implementation-defined, unspecified) every product
  and every partial sum may lose up to 2^-126: the bound adds 2 n * 2^-126.
  When sum|terms| reaches the overflow threshold, a partial sum in some order can overflow though
  the exact result is finite: a non-finite result is admissible there ("overflow-admissible").
  Input-aware (the forward value of ops whose record gives its term structure, OpSpec.exact_sums):
  where every term is a multiple of 2^e and sum|terms| <= 2^24 * 2^e, every order, fused or not,
  is exact (conformance/exact_sums.py states the proof), so the bound is 0, or, for ops that divide
  the sum once afterwards (reduce_mean, avg_pool), that one rounding: gamma_1 |exact| plus half a
  subnormal spacing (TINY when flushing).
- Directed or implementation-defined rounding doubles the unit roundoff in gamma (|d| < 2u).
- A derived bound is +inf where the float32 evaluation it derives can overflow an intermediate
  (a score, a sum of squares, a partial sum) though the exact result is finite: as for reductions,
  any result is admissible there ("overflow-admissible", counted, no ratio recorded). Where the
  rounded reference itself is +-inf the special value must still be met.

Special values for every model: NaN matches NaN only; an expected infinity must be met by the same
infinity (bounded models measure a finite result against the exact value on the top binade's grid);
a subnormal result flushed to the same-signed zero passes only when the policy lets subnormals be
flushed, and every case records what was observed (preserved or flushed).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from conformance import exact_sums, rounding
from conformance.error_terms import ELEMENTARY_ULPS, HALF_SUB, OVERFLOW, TINY, U, \
    correctly_rounding, elementary, flush_allowed, gamma, k_for, op_ulps, unit_roundoff
from conformance.families import OP_SPECS, rule_for
from engine.capsule import KernelCapsule
from engine.types import BackendOp as Op, Reduction, Subnormals

# Failure reasons: the codes evidence records and tests use.
OK = "ok"
NAN_MISMATCH = "nan-mismatch"
INF_MISMATCH = "inf-mismatch"
SIGNED_ZERO = "signed-zero"
NOT_BITWISE = "not-bitwise"
NOT_CORRECTLY_ROUNDED = "not-correctly-rounded"
EXCEEDS_BOUND = "exceeds-bound"
FLUSHED_SUBNORMAL = "flushed-subnormal"
POISON_IN_OUTPUT = "poison-in-output"     # still the allocator's poison bits: never written
REASONS = (OK, NAN_MISMATCH, INF_MISMATCH, SIGNED_ZERO, NOT_BITWISE, NOT_CORRECTLY_ROUNDED,
           EXCEEDS_BOUND, FLUSHED_SUBNORMAL, POISON_IN_OUTPUT)
_CODE = {r: i for i, r in enumerate(REASONS)}

# The reduction facts of an op's record (conformance/families/, read when a model is built or a
# bound evaluated, so a user's record registered later counts as a built-in's): whether its terms
# are rounded products (dot products), the roundings after the sum, whether the sum is divided by n
# afterwards (its magnitude is sum|terms| / n: the sum itself is n times it), and the term
# structure of ops whose forward value gets the input-aware bound (exact_sums.py).

def products_of(op) -> bool:
    spec = OP_SPECS.get(op)
    return spec is not None and spec.products


def extra_roundings_of(op) -> int:
    spec = OP_SPECS.get(op)
    return spec.extra_roundings if spec is not None else 0


def divides_sum(op) -> bool:
    spec = OP_SPECS.get(op)
    return spec is not None and spec.divides_sum


def exact_sums_of(op):
    spec = OP_SPECS.get(op)
    return spec.exact_sums if spec is not None else None


@dataclass(frozen=True)
class ErrorModel:
    """The check applied to one output (the forward value, or one input's gradient)."""
    kind: str               # bitwise | correctly-rounded | faithful | ulps | gamma | derived
    label: str              # human-readable, e.g. "gamma_k * sum|terms|, k = ceil(log2 n)"
    source: str             # derived | declared
    reason: str             # why this bound
    ulps: float = 0.0       # for ulps: the bound in ulps of the rounded reference
    magnitude_units: float = 0.0   # for ulps: plus this many u = 2^-24 of the reference's magnitude
    absolute: float = 0.0   # for ulps: plus this absolute error (a declared intrinsic's, e.g. __logf)
    signed_zero: bool = False
    flush_allowed: bool = False
    unit: float = U         # the unit roundoff the gamma model uses
    extra: int = 0          # extra roundings after a reduction
    order: str | None = None   # fixed-left | fixed-tree: a promise of bits as well
    capsule: str | None = None  # derived: whose rule (families.rule_for: a capsule's own first)
    elementary_ulps: float = ELEMENTARY_ULPS   # derived: the elementary functions' error (E)

    def to_json(self) -> dict:
        return {"kind": self.kind, "label": self.label, "source": self.source,
                "reason": self.reason, "ulps": self.ulps if self.kind == "ulps" else None,
                "magnitude_units": self.magnitude_units if self.kind == "ulps" else None,
                "absolute": self.absolute if self.kind == "ulps" else None,
                "signed_zero": self.signed_zero, "flush_allowed": self.flush_allowed,
                "order": self.order}


def forward_model(capsule: KernelCapsule, ref_kind: str) -> ErrorModel:
    """The model for the capsule's forward value, given the kind the op's reference reports."""
    return _model(capsule, ref_kind, capsule.value_contract.declared_bound, vjp=False)


def vjp_model(capsule: KernelCapsule, ref_kind: str) -> ErrorModel:
    """The model for one gradient. No VJP contract declares a bound: composites are derived.
    Where the engine's tape rule flushes on CUDA (tape_flush_reason), flushed gradients pass and
    the model's reason says why."""
    model = _model(capsule, ref_kind, None, vjp=True)
    why = tape_flush_reason(capsule)
    if why and not flush_allowed(capsule.numerical_policy):
        model = dataclasses.replace(model, reason=f"{model.reason}; subnormals may be flushed: "
                                                  f"the engine's tape rule on CUDA {why}")
    return model


def vjp_bound_policy(capsule: KernelCapsule):
    """The policy a gradient's derived bound reads (BoundContext.policy): the capsule's, with
    subnormals flush-to-zero where the engine's tape rule on CUDA flushes them
    (tape_flush_reason). The rules' underflow terms (error_terms.underflow_unit, dot_underflow)
    must then count 2^-126 a rounding: a subnormal probability flushed to 0 and multiplied by a
    key of 1e20 moves dq far more than the 2^-150 a rounding loses under gradual underflow."""
    pol = capsule.numerical_policy
    if flush_allowed(pol) or tape_flush_reason(capsule) is None:
        return pol
    return dataclasses.replace(pol, subnormals=Subnormals.flush_to_zero)


def tape_flush_reason(capsule: KernelCapsule) -> str | None:
    """Why the engine's own tape rule may flush subnormals in this capsule's VJP (a CUDA capsule
    whose VJP is the tape rule of an op the engine declares in engine.ops.TAPE_FLUSHES_ON_CUDA),
    or None. The capsule's author did not write that rule, so its policy cannot speak for it."""
    from engine.types import Device, VJPMode
    if capsule.device is not Device.cuda or capsule.vjp_mode is not VJPMode.torchlean_tape:
        return None
    import engine.ops
    table = getattr(engine.ops, "TAPE_FLUSHES_ON_CUDA", {})
    return table.get(capsule.op)


def _model(capsule: KernelCapsule, kind: str, declared, vjp: bool) -> ErrorModel:
    pol = capsule.numerical_policy
    flush = flush_allowed(pol)
    if vjp and not flush:
        flush = tape_flush_reason(capsule) is not None
    unit = unit_roundoff(pol)
    order = pol.reduction.label if pol.reduction in (Reduction.fixed_left,
                                                     Reduction.fixed_tree) else None
    what = "gradient" if vjp else "value"
    if kind == "exact":
        return ErrorModel("bitwise", "bit for bit" + ("" if vjp else ", signed zero included"),
                          "derived", f"the exact {what} is a float32: data movement or selection",
                          signed_zero=not vjp, flush_allowed=flush, order=order)
    if kind == "rounded":
        if correctly_rounding(pol):
            return ErrorModel("correctly-rounded", "equals the correctly rounded reference",
                              "derived", f"one IEEE operation under round={pol.rounding.label}",
                              flush_allowed=flush, order=order)
        if op_ulps(pol) <= 1.0:
            return ErrorModel("faithful", "within 1 ulp of the rounded reference (faithful)",
                              "derived", f"one operation under round={pol.rounding.label}: either "
                              "float32 neighbour of the exact result", ulps=1.0,
                              flush_allowed=flush, order=order)
        return ErrorModel("faithful", f"within {op_ulps(pol):g} ulp of the rounded reference",
                          "derived", f"one operation under round={pol.rounding.label}: CUDA's "
                          "approximate float32 division (-prec-div=false, as --use_fast_math "
                          f"sets) is within {op_ulps(pol):g} ulp per the CUDA C Programming Guide",
                          ulps=op_ulps(pol), flush_allowed=flush, order=order)
    if kind == "reduction":
        products = products_of(capsule.op)
        extra = extra_roundings_of(capsule.op)
        k_label = {Reduction.fixed_left: "n - 1", Reduction.fixed_tree: "ceil(log2 n)"}.get(
            pol.reduction, "n")
        if products and pol.reduction in (Reduction.fixed_left, Reduction.fixed_tree):
            k_label += " + 1"
        if extra:
            k_label += f" + {extra}"
        under = ("2 n 2^-126 (flushing)" if flush else "n 2^-150" if products else "0")
        exact = ""
        if not vjp and exact_sums_of(capsule.op) is not None:
            exact = ("; the division's rounding alone" if extra else "; 0") + \
                " where the terms are exact in every order (exact_sums.py)"
        return ErrorModel(
            "gamma", f"gamma_k * sum|terms| + {under}, k = {k_label} "
                     f"(reduce={pol.reduction.label}){exact}", "derived",
            "Higham's bound for recursive, pairwise or any-order summation with the policy's k",
            flush_allowed=flush, unit=unit, extra=extra, order=order)
    if declared is not None:
        units = float(getattr(declared, "magnitude_units", 0.0) or 0.0)
        absolute = float(getattr(declared, "absolute", 0.0) or 0.0)
        extra = (f" + {units:g} u*sum|terms|" if units else "") + \
            (f" + {absolute:.3g} absolute" if absolute else "")
        return ErrorModel("ulps", f"within {declared.ulps:g} ulp{extra} of the rounded reference",
                          "declared", declared.reason, ulps=float(declared.ulps),
                          magnitude_units=units, absolute=absolute, flush_allowed=flush,
                          order=order)
    rule = rule_for(capsule.op, capsule.name, vjp)
    if rule is not None:
        e_ulps = elementary_ulps_for(capsule)
        reason = rule.reason if e_ulps == ELEMENTARY_ULPS else (
            f"{rule.reason}; float32 elementary functions within {e_ulps:g} ulp, as the "
            "capsule declares (its notes say why)")
        return ErrorModel("derived", rule.label, "derived", reason, flush_allowed=flush,
                          unit=unit, order=order, capsule=capsule.name, elementary_ulps=e_ulps)
    return ErrorModel("correctly-rounded", "equals the correctly rounded reference "
                      "(no declared bound)", "derived", f"the {what} contract declares no ulp "
                      "bound and none is derived for this op: declare one in the value contract",
                      flush_allowed=flush, order=order)


# --- comparison ---------------------------------------------------------------------------------

@dataclass
class BoundContext:
    """What a derived bound may look at besides the Reference."""
    op: Op
    inputs: tuple
    params: dict
    policy: object
    out: np.ndarray | None = None          # the capsule's forward output (VJP rules inherit its error)
    fwd_ref: object | None = None          # the forward Reference
    g: np.ndarray | None = None            # the cotangent
    input_index: int = 0                   # which gradient a VJP bound is for


@dataclass
class Verdict:
    """Per-element outcome of one output's comparison."""
    ok: np.ndarray
    reason: np.ndarray          # index into REASONS
    err: np.ndarray             # |got - exact|, nan where a special value decided
    bound: np.ndarray           # absolute bound; nan for equality models
    ulps: np.ndarray            # |got - value| in ulps of the rounded reference
    ratio: np.ndarray           # err / bound (bounded), err / half an ulp (equality models)
    observed: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return bool(np.all(self.ok))

    def reasons(self) -> dict[str, int]:
        codes, counts = np.unique(self.reason[~self.ok], return_counts=True)
        return {REASONS[int(c)]: int(n) for c, n in zip(codes, counts)}


def subnormal(x) -> np.ndarray:
    a = np.abs(np.asarray(x, dtype=np.float64))
    return (a > 0) & (a < TINY)


def daz(x: np.ndarray) -> np.ndarray:
    """x with every subnormal float32 read as the same-signed zero (a flushing kernel's DAZ)."""
    return np.where(subnormal(x), np.copysign(np.float32(0), x), x).astype(np.float32)


def rescue(verdict: Verdict, again: Verdict) -> int:
    """Accept the elements `verdict` failed that `again` (the comparison against the reference
    of the inputs read as flushed) passes; returns how many."""
    rescued = ~verdict.ok & again.ok
    verdict.ok |= rescued
    verdict.reason[rescued] = 0
    # a rescued element's error is the one against the reference it passed by: its error
    # against the unflushed one would show a passed record with a worst error far over its bound
    for name in ("err", "ratio", "ulps"):
        getattr(verdict, name)[rescued] = getattr(again, name)[rescued]
    return int(np.count_nonzero(rescued))


def _magnitude_term(model: ErrorModel, ref, shape) -> np.ndarray | float:
    """magnitude_units * u * magnitude (|exact| without one) for a declared ulps bound, 0 where
    the magnitude is not finite (an infinite or NaN input: the IEEE special value decides), plus
    the declared absolute term."""
    if not model.magnitude_units:
        return model.absolute
    mag = np.abs(np.asarray(ref.exact, np.float64)) if ref.magnitude is None else \
        np.asarray(ref.magnitude, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        term = model.magnitude_units * U * np.broadcast_to(mag, shape)
    return np.where(np.isfinite(term), term, 0.0) + model.absolute


def bound_array(model: ErrorModel, ref, ctx: BoundContext) -> np.ndarray:
    """The absolute error bound per element for bounded models (ulps, faithful, gamma, derived)."""
    value = np.asarray(ref.value, dtype=np.float64)
    floor = TINY if model.flush_allowed else 0.0   # one flushed intermediate
    if model.kind in ("ulps", "faithful"):
        return model.ulps * rounding.ulp_array(value) + _magnitude_term(model, ref, value.shape)
    if model.kind == "gamma":
        n = ref.terms if ref.terms is not None else 1
        n_arr = np.broadcast_to(np.asarray(n, dtype=np.float64), value.shape)
        k = k_for(ctx.policy.reduction, n_arr, products_of(ctx.op)) + model.extra
        mag = np.abs(ref.exact) if ref.magnitude is None else np.asarray(ref.magnitude)
        under = (2 * n_arr * TINY if model.flush_allowed
                 else n_arr * HALF_SUB if products_of(ctx.op) else 0.0)
        with np.errstate(invalid="ignore", over="ignore"):
            b = gamma(k, model.unit) * mag * (1 + 2 * U) + under
        # an infinite sum|terms| comes from an infinite input: the IEEE special value must match
        b = np.where(np.isfinite(b), b, 0.0)
        exact = exact_in_every_order(model, ref, ctx, np.asarray(mag, np.float64), n_arr)
        if exact is None:
            return b
        return np.where(exact, exact_sum_bound(model, ref), b)
    rule = rule_for(ctx.op, model.capsule, vjp=ctx.g is not None)
    with elementary(model.elementary_ulps):
        return rule.bound(ref, ctx, model.unit) + 4 * (floor or HALF_SUB)


def exact_in_every_order(model: ErrorModel, ref, ctx: BoundContext, mag, n) -> np.ndarray | None:
    """Where the forward value's terms are exact in every order (exact_sums.py), or None for a
    gradient or an op without term facts. sum|terms| is the Reference's magnitude (times n for a
    sum divided by n afterwards)."""
    facts = exact_sums_of(ctx.op)
    if facts is None or ctx.g is not None:
        return None
    term_grain, lowest = exact_sums.term_grains(facts, ctx.inputs)
    total = mag * n if divides_sum(ctx.op) else mag
    with np.errstate(invalid="ignore", over="ignore"):
        return exact_sums.exact_in_every_order(term_grain, lowest, total, model.flush_allowed)


def exact_sum_bound(model: ErrorModel, ref) -> np.ndarray | float:
    """The bound where the sum is exact: 0, plus each rounding after it (a mean's division:
    gamma_extra |exact|, and half a subnormal spacing each, TINY when flushing)."""
    if not model.extra:
        return 0.0
    exact = np.abs(np.nan_to_num(np.asarray(ref.exact, np.float64), nan=0.0, posinf=0.0,
                                 neginf=0.0))
    under = model.extra * (TINY if model.flush_allowed else HALF_SUB)
    return gamma(model.extra, model.unit) * exact * (1 + 2 * U) + under


def elementary_ulps_for(capsule: KernelCapsule) -> float:
    """E for a capsule's derived rules: what the capsule declares (KernelCapsule.elementary_ulps:
    libdevice's ELEMENTARY_ULPS unless its build says otherwise)."""
    return float(capsule.elementary_ulps)


def compare(model: ErrorModel, ref, got, ctx: BoundContext) -> Verdict:
    """Check `got` (the capsule's float32 output) element by element against `ref` under `model`."""
    shape = np.shape(ref.value)
    # work on flat arrays (0-d arrays do not take boolean masks), reshape at the end
    v = np.asarray(ref.value, dtype=np.float32).reshape(-1)
    x = np.asarray(ref.exact, dtype=np.float64).reshape(-1)
    y32 = np.asarray(got, dtype=np.float32).reshape(-1)
    y = y32.astype(np.float64)
    v64 = v.astype(np.float64)
    reason = np.zeros(v.shape, dtype=np.int8)
    overflow_admissible = 0
    nan_v, nan_y = np.isnan(v64), np.isnan(y)
    reason[nan_v != nan_y] = _CODE[NAN_MISMATCH]
    both_nan = nan_v & nan_y
    live = ~(nan_v | nan_y)
    inf_v, inf_y = np.isinf(v64) & live, np.isinf(y) & live
    ulp_v = rounding.ulp_array(v64)
    with np.errstate(invalid="ignore", over="ignore"):
        # A result beyond the float32 range stands for 2^128: distances stay finite on the top grid.
        y_fin = np.where(np.isinf(y), np.copysign(2.0 ** 128, y), y)
        x_fin = np.where(np.isinf(x), np.copysign(2.0 ** 128, x), x)
        v_fin = np.where(np.isinf(v64), np.copysign(2.0 ** 128, v64), v64)
        err = np.where(live, np.abs(y_fin - x_fin), np.nan)
        ulps = np.where(live, np.abs(y_fin - v_fin) / ulp_v, 0.0)
    ulps = np.where(both_nan | (live & (y == v64)), 0.0, ulps)
    if model.kind in ("bitwise", "correctly-rounded"):
        bound = np.full(v.shape, np.nan)
        same = y32.view(np.uint32) == v.view(np.uint32)
        equal = (y == v64)
        if model.kind == "bitwise":
            bad = live & ~same
            reason[bad & equal] = _CODE[SIGNED_ZERO] if model.signed_zero else 0
            reason[bad & ~equal] = _CODE[NOT_BITWISE]
        else:
            reason[live & ~equal] = _CODE[NOT_CORRECTLY_ROUNDED]
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(live, err / (0.5 * ulp_v), 0.0)
        ratio = np.where(both_nan | (live & equal), np.minimum(ratio, 1.0), ratio)
        # an infinity met by anything else is an infinity mismatch, not a rounding error
        reason[(inf_v | inf_y) & live & ~equal] = _CODE[INF_MISMATCH]
    else:
        bound = np.asarray(bound_array(model, ref, ctx), dtype=np.float64)
        bound = np.broadcast_to(bound, shape).reshape(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ratio = np.where(live, err / bound, 0.0)
        if model.kind in ("ulps", "faithful"):
            # these bounds are stated in ulps of the rounded reference: measure from it
            with np.errstate(invalid="ignore", over="ignore"):
                err_model = np.where(live, np.abs(y_fin - v_fin), np.nan)
            bound_model = model.ulps * ulp_v + np.asarray(
                _magnitude_term(model, ref, shape), np.float64).reshape(-1)
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(live, err_model / bound_model, 0.0)
        else:
            err_model, bound_model = err, bound
        ratio = np.where(live & (y == v64), 0.0, ratio)
        over = ~(err_model <= bound_model) & live & (y != v64)
        reason[over] = _CODE[EXCEEDS_BOUND]
        # an infinity of the wrong sign, or an expected infinity met by a finite far away
        reason[live & inf_v & inf_y & (y != v64)] = _CODE[INF_MISMATCH]
        reason[over & (inf_v ^ inf_y)] = _CODE[INF_MISMATCH]
        if model.kind == "gamma" and ref.magnitude is not None:
            # a partial sum may overflow when sum|terms| reaches the threshold (module docstring);
            # a mean's magnitude is sum|terms| / n, and its sum is formed before the division
            total = np.asarray(ref.magnitude, np.float64).reshape(-1)
            if divides_sum(ctx.op) and ref.terms is not None:
                total = total * np.broadcast_to(np.asarray(ref.terms, np.float64),
                                                shape).reshape(-1)
            risky = total * (1 + 2 * U) >= OVERFLOW
            admissible = risky & (np.isinf(y) | np.isnan(y))
            reason[admissible] = 0
            ratio = np.where(admissible, np.nan, ratio)   # not an error measurement
            overflow_admissible = int(np.count_nonzero(admissible))
        if model.kind == "derived":
            # +inf: the float32 evaluation can overflow an intermediate here (module docstring)
            risky = np.isposinf(bound) & np.isfinite(v64)
            # where the rounded reference is +-inf the special value must still be met
            reason[np.isposinf(bound) & inf_v & (y != v64)] = _CODE[INF_MISMATCH]
            admissible = risky & (reason != 0)
            reason[admissible] = 0
            ratio = np.where(risky, np.nan, ratio)   # not an error measurement
            overflow_admissible = int(np.count_nonzero(admissible))
    # subnormal results: preserved, or flushed to the same-signed zero
    sub_v = subnormal(v64)
    # a flush matters only where the result misses its model: a zero within a bound is no flush
    flushed = sub_v & (y == 0) & (np.signbit(y) == np.signbit(v64)) & (reason != 0)
    if model.flush_allowed:
        reason[flushed] = 0
        ratio = np.where(flushed, np.nan, ratio)   # the policy's flush: not an error measurement
    else:
        reason[flushed] = _CODE[FLUSHED_SUBNORMAL]
    ok = reason == 0
    observed = {"subnormal_results": int(np.count_nonzero(sub_v)),
                "subnormals_flushed": int(np.count_nonzero(flushed)),
                "subnormals_preserved": int(np.count_nonzero(sub_v & (y != 0) & ok)),
                "overflow_admissible": overflow_admissible}
    return Verdict(ok.reshape(shape), reason.reshape(shape), err.reshape(shape),
                   np.asarray(bound, dtype=np.float64).reshape(shape), ulps.reshape(shape),
                   np.asarray(ratio, dtype=np.float64).reshape(shape), observed)


def mark_poison(verdict: Verdict, poisoned: np.ndarray) -> None:
    """Elements that still hold the allocator's poison bits fail as never written, whatever the
    comparison said (a poison NaN would otherwise match an expected NaN)."""
    poisoned = np.asarray(poisoned, dtype=bool).reshape(verdict.ok.shape)
    if np.any(poisoned):
        verdict.ok[poisoned] = False
        verdict.reason[poisoned] = _CODE[POISON_IN_OUTPUT]
        verdict.observed["poisoned_elements"] = int(np.count_nonzero(poisoned))


def reason_name(code: int) -> str:
    return REASONS[int(code)]


def isclose_ulps(a: float, b: float) -> float:
    """Distance between two float32 values in ulps of b (for messages)."""
    if math.isnan(a) or math.isnan(b):
        return 0.0 if math.isnan(a) and math.isnan(b) else math.inf
    return abs(a - b) / rounding.ulp(b)
