"""The exhaustive sweep of a unary kernel in a 16-bit format: all 2^16 inputs, each output
judged against the correctly rounded reference (refs.py).

Special values must match exactly (a NaN where the reference has one, the same infinity, the
sign of an exact zero); a finite output must be within the declared bound: `bound_ulps` ulps of the
format at the exact value (0.5: correctly rounded, so bitwise the reference's). A reference zero
or subnormal returned as zero while the exact value is not is `flushed-subnormal` when the
exact result is a nonzero subnormal of the format. The float64 approximation of the exact value
is within refs.MARGIN (relative) of it; an error within that of the bound is counted passed. A
peer's kernel audited through our module of it is judged under the peer's contract too
(conventions.py): a result that is exactly the value of one of its conventions is a difference,
listed apart, not a failure.
"""
from __future__ import annotations

import time

import numpy as np

from conformance.formats import LOWP_FORMAT
from conformance.isolation.remote import KernelProcessError
from conformance.lowp.formats import Format
from conformance.lowp.kernel import InputMutated
from conformance.lowp.refs import MARGIN, reference

COUNTEREXAMPLES = 5


class LowpKernelError(RuntimeError):
    """The kernel under audit raised, returned something other than its format's array
    (`reason` raised), or wrote into its inputs (`mutated-input`)."""

    def __init__(self, message: str, reason: str = "raised") -> None:
        super().__init__(message)
        self.reason = reason


REASONS = ("", "nan-mismatch", "inf-mismatch", "signed-zero", "flushed-subnormal")
OVER = len(REASONS)       # the code of a finite result over its tolerance (named by the caller)


def classify_codes(fmt: Format, got, ref, exact, tolerance, zero_sign_matters,
                   overflow_ok=None, xp=np):
    """(reason code per element: an index of REASONS, OVER for a finite result over the
    tolerance, 0 where it passed; ulps of |got - exact| in the format's ulp) of results `got`
    against the correctly rounded `ref` and the exact values: NaN and infinities as the
    reference's (save `overflow_ok` elements), the sign of a zero where `zero_sign_matters`, and a
    finite result within `tolerance` of the exact value, else `flushed-subnormal` (a nonzero
    subnormal result returned as zero) or over. NumPy or CuPy arrays (`xp`), all float64."""
    code = xp.zeros(got.shape, dtype=xp.uint8)
    nan_ref, nan_got = xp.isnan(ref), xp.isnan(got)
    code = xp.where(nan_ref != nan_got, 1, code)
    both = ~nan_ref & ~nan_got
    with np.errstate(all="ignore"):
        inf = both & (xp.isinf(ref) | xp.isinf(got))
        mismatch = inf & (ref != got)
        if overflow_ok is not None:
            mismatch &= ~overflow_ok
        code = xp.where(mismatch, 2, code)
        zero = both & (ref == 0) & (got == 0) & (xp.signbit(ref) != xp.signbit(got))
        code = xp.where(zero & zero_sign_matters, 3, code)
        finite = both & ~inf
        err = xp.abs(got - exact)
        over = finite & (code == 0) & (err > tolerance) & (got != ref)
        flushed = over & (got == 0) & (xp.abs(exact) > 0) & (xp.abs(exact) < fmt.min_normal)
        code = xp.where(over, xp.where(flushed, 4, OVER), code).astype(xp.uint8)
        ulps = xp.where(finite, err / fmt.ulp(exact, xp), 0.0)
    return code, ulps


def classify(fmt: Format, got, ref, exact, tolerance, over_name: str, zero_sign_matters,
             overflow_ok=None) -> tuple[np.ndarray, np.ndarray]:
    """classify_codes on NumPy arrays, the codes as names ('' where it passed; `over_name` for a
    finite result over its tolerance)."""
    code, ulps = classify_codes(fmt, got, ref, exact, tolerance, zero_sign_matters, overflow_ok)
    return np.array(REASONS + (over_name,), dtype=object)[code], ulps


def unary_reasons(fmt: Format, x, got, ref, exact, bound_ulps) -> tuple[np.ndarray, np.ndarray]:
    """A unary sweep's classify: the sign of an exact zero is the contract's; a nonzero result
    that underflowed to a zero is judged by its size, save under correct rounding, where the
    bits are the contract."""
    with np.errstate(all="ignore"):
        tolerance = bound_ulps * fmt.ulp(exact) * (1 + MARGIN) + MARGIN * np.abs(exact)
    correctly_rounded = bound_ulps <= 0.5
    reason, ulps = classify(fmt, got, ref, exact, tolerance,
                            "not-correctly-rounded" if correctly_rounded else "exceeds-bound",
                            zero_sign_matters=exact == 0)
    if correctly_rounded:
        zero = (ref == 0) & (got == 0) & (np.signbit(ref) != np.signbit(got))
        reason[zero & (exact != 0)] = "not-correctly-rounded"
    return reason, ulps


def as_verdict(what: str, call):
    """call()'s value; the kernel's own failure in it (a raise, a write into its inputs) as its
    verdict, LowpKernelError, not a harness error. `what` names the kernel."""
    try:
        return call()
    except (LowpKernelError, KernelProcessError):   # its process ended or hung: its own verdict
        raise
    except InputMutated as exc:
        raise LowpKernelError(str(exc), "mutated-input") from exc
    except Exception as exc:
        raise LowpKernelError(f"{what} raised {type(exc).__name__}: {exc}") from exc


def check_form(what: str, got: np.ndarray, want: tuple, where: str, fmt: Format) -> None:
    """LowpKernelError unless `got` holds bit patterns of shape `want`; `where` says for which
    inputs."""
    if got.dtype != np.uint16 or got.shape != tuple(want):
        raise LowpKernelError(f"{what} returned {got.dtype}{list(got.shape)} for {where}; "
                              f"expected {fmt.name}{list(want)}")


def call_twice(kernel, bits: list, want: tuple, where: str, part: str = "forward"):
    """The kernel's (or its VJP's) result bits on `bits`, and a second call's: a raise, another
    dtype or a shape other than `want` is the kernel's verdict (LowpKernelError), `where` says
    for which inputs."""
    what = kernel.name + (" VJP" if part == "vjp" else "")
    got, again = as_verdict(what, lambda: tuple(np.asarray(kernel.call_bits(*bits, part=part))
                                                for _ in range(2)))
    check_form(what, got, want, where, kernel.fmt)
    return got, again


def mark_unrepeatable(reason: np.ndarray, got: np.ndarray, again: np.ndarray) -> None:
    """`not-repeatable` where the second call's bits differ from the first's (everywhere when it
    returned another shape), on elements that passed otherwise."""
    if again.shape == got.shape:
        reason[(again != got) & (reason == "")] = "not-repeatable"
    else:
        reason[reason == ""] = "not-repeatable"


def _side(kernel, part: str, bits, x, table, bound: float, prefix: str = "",
          differences=None, out=None) -> tuple[dict, np.ndarray]:
    """One output's sweep (the forward, or the VJP at a unit cotangent): its tallies, and the
    kernel's values. `differences` (conventions.Differences, or None: no peer contract) takes
    the failing results its contract explains, judged on the kernel's forward output `out`."""
    fmt = kernel.fmt
    ref, exact, by_mpmath = reference(fmt, kernel.op, x, table)
    got_bits, again = call_twice(kernel, bits, bits[0].shape, f"all {bits[0].size} inputs", part)
    got = fmt.decode(got_bits)
    reason, ulps = unary_reasons(fmt, x, got, ref, exact, bound)
    explained = np.zeros(got.shape, dtype=bool)
    if differences is not None:
        def shown(i):
            return {"input": f"0x{int(bits[0][i]):04x}", "expected": fmt.hex(ref[i]),
                    "got": f"0x{int(got_bits[i]):04x}"}
        explained = differences.explain(
            part, fmt, [x], got, reason != "", out=out, shown=shown,
            cotangent=fmt.decode(bits[1]) if part == "vjp" else None)
        reason[explained], ulps[explained] = "", 0.0   # the peer's convention, not an error
    mark_unrepeatable(reason, got_bits, again)
    failed = reason != ""
    names, counts = np.unique(reason[failed].astype(str), return_counts=True)
    finite_ok = np.isfinite(ulps) & ~failed
    first = np.flatnonzero(failed)[:COUNTEREXAMPLES]
    return {
        "bound_ulps": bound, "failed": int(failed.sum()),
        "failure_reasons": {prefix + str(k): int(v) for k, v in zip(names.tolist(),
                                                                   counts.tolist())},
        "max_ulps_passing": float(ulps[finite_ok].max()) if finite_ok.any() else 0.0,
        # the explained results are the peer's differences (the record's `differences`)
        "not_correctly_rounded": int(np.count_nonzero((got_bits != fmt.encode(ref))
                                                      & ~(np.isnan(got) & np.isnan(ref))
                                                      & ~explained)),
        "decided_by_mpmath": by_mpmath,
        "counterexamples": [{"input": f"0x{int(bits[0][i]):04x}", "input_value": float(x[i]),
                             "expected": fmt.hex(ref[i]),
                             "got": f"0x{int(got_bits[i]):04x}", "got_value": float(got[i]),
                             "reason": prefix + str(reason[i])} for i in first]}, got


def sweep(kernel, contract=None) -> dict:
    """The sweep's record: counts, the worst ulps, the failure reasons and the first
    counterexamples (input, expected and returned bits), of the forward and, when the kernel
    brings one, of its VJP at a unit cotangent (reasons `vjp-...`). `kernel` is a LowpKernel
    (called in this process) or a stand-in whose `call_bits` runs it in its kernel process
    (remote.py). `contract`: its peer's (conformance/lowp/conventions.py), chosen by the plugin
    spec; the results it explains are the record's `differences`, not failures."""
    from conformance.lowp.conventions import Differences
    from conformance.lowp.derivatives import DERIVATIVES
    fmt = kernel.fmt
    bits = fmt.all_bits()
    x = fmt.decode(bits)
    differences = None if contract is None else Differences(contract)
    t0 = time.perf_counter()
    fwd, out = _side(kernel, "forward", [bits], x, None, kernel.bound_ulps,
                     differences=differences)
    vjp = None
    if kernel.vjp is not None:
        ones = np.full(bits.shape, fmt.encode(np.array([1.0]))[0], dtype=np.uint16)
        bound = kernel.bound_ulps if getattr(kernel, "vjp_bound_ulps", None) is None \
            else kernel.vjp_bound_ulps
        vjp, _ = _side(kernel, "vjp", [bits, ones], x, DERIVATIVES, bound, "vjp-",
                       differences=differences, out=out)
    reasons = {**fwd["failure_reasons"], **(vjp or {}).get("failure_reasons", {})}
    return {
        "format": LOWP_FORMAT, "kernel": kernel.name, "op": kernel.op, "storage": fmt.name,
        "patterns": int(bits.size), "status": "failed" if reasons else "passed",
        **{k: v for k, v in fwd.items() if k != "failure_reasons"},
        "failure_reasons": reasons,
        "counterexamples": fwd["counterexamples"] + (vjp or {}).get("counterexamples", []),
        "vjp": vjp, **({} if differences is None else {"differences": differences.record()}),
        "seconds": round(time.perf_counter() - t0, 3)}
