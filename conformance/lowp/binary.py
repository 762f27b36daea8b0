"""The exhaustive sweep of a binary 16-bit kernel (add, sub, mul, max, min): every pair (a, b) of
the format's 2^16 x 2^16 bit patterns, 2^32 results, each judged against the correctly rounded
reference. The pairs come in shards of rows (kernel.pair_inputs: a runs over all 2^16 patterns,
b over the shard's rows); the kernel makes and computes them where it runs (its kernel process),
this process judges each shard on NumPy or, with `device="cuda"`, on CuPy (float64 and integers
only: no GPU flushes float64, and the patterns are decoded from their bit fields).

References, exact before one rounding to the format (formats.Format.round):
- mul: the product of two values of p <= 11 significand bits has at most 22, and its exponent
  lies within float64's range, so the float64 product is exact;
- add, sub: the float64 sum is the exact sum rounded once to 53 bits, and 53 >= 2p + 2 for both
  formats (p = 8, 11), so rounding it again to the format gives the exact sum's correct rounding
  (Figueroa, "When is double rounding innocuous?", SIGNUM 1995); a sum that underflows is exact;
- max, min: one of the operands, TorchLean's (docs/OPS.md): NaN if either is NaN, else the larger
  (smaller), the first operand on equality (so max(-0, +0) is -0).
A kernel declaring correct rounding (0.5 ulp) must return the reference's bits (a NaN for a NaN,
the sign of every zero); a looser bound is judged as a unary sweep's (sweep.py).
An op of the plugin's own is judged the same way against its contract's reference (contracts.py:
the plugin's float64 function, certified against its mpmath one first); its VJP, for our five
ops, in binary_vjp.py. A kernel of a peer, audited through our module of it, is judged under the
peer's contract too (conventions.py: PyTorch's max and min return the second operand of a -0/+0
tie, a difference, not a failure).
"""
from __future__ import annotations

import contextlib
import time

import numpy as np

from conformance.formats import LOWP_FORMAT
from conformance.lowp.formats import SPECIALS, Format, host
from conformance.lowp.kernel import BINARY, pair_inputs
from conformance.lowp.refs import MARGIN
from conformance.lowp.sweep import OVER, REASONS, as_verdict, check_form, classify_codes

ROWS = 1 << 16                  # b's patterns: all rows hold every pair
SHARD_ROWS = {"cpu": 16, "cuda": 2048}    # 2^20 and 2^27 pairs a shard
COUNTEREXAMPLES = 5
# zeros, the smallest subnormals, ones, the largest finites, infinities and NaNs of both formats
class SweepRowsError(ValueError):
    """A selection of rows of b that is not a nonempty set of 16-bit patterns."""


def reference(op: str, fmt: Format, a, b, xp=np):
    """(the correctly rounded result, its float64 approximation of the exact value: exact but
    for add and sub, whose float64 sum is within 2^-53 relative of it)."""
    with np.errstate(all="ignore"):   # inf - inf and the like: the NaN IEEE gives, on purpose
        if op in ("add", "sub", "mul"):
            exact = a + b if op == "add" else a - b if op == "sub" else a * b
            return fmt.round(exact, xp), exact
        pick = (b > a) if op == "max" else (b < a)
        out = xp.where(xp.isnan(a) | xp.isnan(b), xp.nan, xp.where(pick, b, a))
        return out, out


def classify_against(fmt: Format, bound_ulps: float, got, ref, exact, xp=np,
                     exact_error: float = 0.0):
    """(reason code per result: sweep.REASONS' index, sweep.OVER over the bound; ulps of the
    error in the format's ulp at the exact value) of results `got` against the correctly rounded
    `ref`; `exact` approximates the exact value within MARGIN + `exact_error` (relative)."""
    if bound_ulps <= 0.5:     # correctly rounded: the reference's bits, zeros' signs included
        return classify_codes(fmt, got, ref, exact, 0.0, True, xp=xp)
    with np.errstate(all="ignore"):
        tolerance = bound_ulps * fmt.ulp(exact, xp) * (1 + MARGIN) + \
            (MARGIN + exact_error) * xp.abs(exact)
    return classify_codes(fmt, got, ref, exact, tolerance, exact == 0, xp=xp)


def _reference(op: str, fmt: Format, a, b, xp, op_contract):
    """(correctly rounded, float64 approximation of the exact value, its relative error beyond
    MARGIN, how many pairs mpmath decided): ours, or the contract's for an op of its own."""
    if op_contract is None:
        return (*reference(op, fmt, a, b, xp), 0.0, 0)
    from conformance.lowp.contracts import U64, reference as contract_reference
    ref, exact, decided = contract_reference(op_contract, fmt, a, b, xp)
    k = op_contract.contract.float64_error
    return ref, exact, (float(k) * U64 if isinstance(k, (int, float)) else U64), decided


def judge_codes(op: str, fmt: Format, bound_ulps: float, a, b, got, xp=np, op_contract=None):
    """(reason code per pair: sweep.REASONS' index, sweep.OVER over the bound; ulps of the error
    in the format's ulp at the exact value; the reference) for results `got` (float64 values).
    `op_contract`: a contracts.LoadedContract, for an op of the plugin's own."""
    ref, exact, exact_error, _ = _reference(op, fmt, a, b, xp, op_contract)
    return (*classify_against(fmt, bound_ulps, got, ref, exact, xp, exact_error), ref)


def select_rows(stride: int = 1) -> np.ndarray:
    """b's rows a sweep covers: all 2^16 (stride 1, exhaustive), or every stride-th pattern and
    each special one (zeros, the smallest subnormals, the largest finites, infinities, NaNs), a
    sample for machines where 2^32 pairs take too long."""
    if not isinstance(stride, int) or isinstance(stride, bool) or not 1 <= stride <= ROWS:
        raise SweepRowsError(f"--pair-stride {stride!r}: expected an integer from 1 (every pair) "
                             f"to {ROWS} (one row of b and the special ones)")
    rows = np.arange(0, ROWS, stride, dtype=np.uint32)
    if stride > 1:
        rows = np.union1d(rows, np.array(SPECIALS, dtype=np.uint32))
    return rows.astype(np.uint16)


class Tally:
    """A sweep's running counts, worst passing error and first counterexamples."""

    def __init__(self) -> None:
        self.counts = np.zeros(OVER + 2, dtype=np.int64)    # + not-repeatable
        self.max_ulps = 0.0
        self.not_correctly_rounded = 0
        self.pairs = 0
        self.decided_by_mpmath = 0      # an own op's pairs whose rounding mpmath decided
        self.examples: list[dict] = []


def explain_failing(differences, part: str, fmt: Format, input_bits, operands, got_bits, got,
                    ref, code, ulps, xp, cotangent=None, grad: int = 0,
                    output: str | None = None) -> int:
    """Mark passed (code 0, ulps 0) the failing results of a shard (flat arrays: one output)
    that the peer's contract explains (conventions.py: its rule's value, exactly), counted into
    `differences`; how many. `input_bits`: every input's patterns (shown in the clause's
    example), `operands`: a and b's values, `cotangent`, `grad`, `output`: a binary VJP's (its g,
    which gradient, its name). Only the failing results come to the host."""
    at = host(xp.flatnonzero(code))
    if at.size == 0:
        return 0
    idx = xp.asarray(at)
    shown_bits = [host(v[idx]) for v in input_bits]
    pg, rf = host(got_bits[idx]), host(ref[idx])

    def shown(i):
        return {"input": ", ".join(f"0x{int(v[i]):04x}" for v in shown_bits),
                **({} if output is None else {"output": output}), "expected": fmt.hex(rf[i]),
                "got": f"0x{int(pg[i]):04x}"}
    explained = differences.explain(
        part, fmt, [host(v[idx]) for v in operands], host(got[idx]),
        np.ones(at.size, dtype=bool), cotangent=None if cotangent is None else
        host(cotangent[idx]), grad=grad, shown=shown)
    if explained.any():
        hit = xp.asarray(at[explained])
        code[hit] = 0
        ulps[hit] = 0.0
    return int(explained.sum())


def _judge_shard(kernel, rows: np.ndarray, xp, tally: Tally, over_name: str,
                 differences=None, op_contract=None, next_rows=None) -> None:
    """Judge the shard of `rows`; a kernel in its own process (remote.py) is asked for the
    shard of `next_rows` first, so that it computes that one while this one is judged."""
    fmt, n = kernel.fmt, rows.size << 16
    bits, differ, where = as_verdict(kernel.name, lambda: kernel.call_pairs(rows))
    if next_rows is not None and hasattr(kernel, "prefetch_pairs"):
        kernel.prefetch_pairs(next_rows)
    bits = np.asarray(bits)
    check_form(kernel.name, bits, (n,), f"the {n} pairs of rows "
               f"{int(rows[0]):#06x}..{int(rows[-1]):#06x}", fmt)
    a_bits, b_bits = pair_inputs(rows, xp)
    a, b = fmt.decode(a_bits, xp), fmt.decode(b_bits, xp)
    got_bits = xp.asarray(bits)
    got = fmt.decode(got_bits, xp)
    ref, exact, exact_error, decided = _reference(kernel.op, fmt, a, b, xp, op_contract)
    code, ulps = classify_against(fmt, kernel.bound_ulps, got, ref, exact, xp, exact_error)
    tally.decided_by_mpmath += decided
    explained = 0 if differences is None else \
        explain_failing(differences, "forward", fmt, (a_bits, b_bits), (a, b), got_bits, got, ref,
                        code, ulps, xp)
    tally_shard(tally, fmt, code, ulps, got, ref, differ, where, xp,
                lambda i, c: _example(fmt, i, a_bits, b_bits, got_bits, ref, c, over_name),
                explained)


def tally_shard(tally: Tally, fmt: Format, code, ulps, got, ref, differ: int, where, xp,
                example, explained: int = 0) -> None:
    """Add one shard's judged results to the tally: `code` and `ulps` from classify_against,
    `not-repeatable` where a second call's bits differed (`differ` of them, the first at
    `where`) on a result that passed, and `example(i, code)` for the first result of each reason
    not shown yet (`i` a flat index: the arrays may hold several outputs). `explained`: how many
    results a peer's contract explained (passed, but not the reference's bits)."""
    code, ulps, got, ref = (x.reshape(-1) for x in (code, ulps, got, ref))
    if differ:    # not-repeatable where a second call's bits differed on a pair that passed
        at = xp.asarray(where)
        code[at] = xp.where(code[at] == 0, OVER + 1, code[at]).astype(xp.uint8)
    tally.counts += host(xp.bincount(code.astype(xp.int32), minlength=OVER + 2))[:OVER + 2]
    tally.counts[OVER + 1] += differ - where.size      # differences past the ones listed
    passed = (code == 0) & xp.isfinite(ulps)
    if bool(passed.any()):
        tally.max_ulps = max(tally.max_ulps, float(ulps[passed].max()))
    same = ((got == ref) & (xp.signbit(got) == xp.signbit(ref))) | (xp.isnan(got) & xp.isnan(ref))
    # a result the peer's contract explained is a difference (the record's `differences`)
    tally.not_correctly_rounded += int((~same).sum()) - explained
    tally.pairs += code.size
    if len(tally.examples) < COUNTEREXAMPLES:    # the first pair of each reason not shown yet
        shown = {e["code"] for e in tally.examples}
        for c in np.flatnonzero(host(xp.bincount(code.astype(xp.int32), minlength=OVER + 2))):
            if c and int(c) not in shown and len(tally.examples) < COUNTEREXAMPLES:
                i = int(host(xp.flatnonzero(code == c)[:1])[0])
                tally.examples.append(example(i, int(c)))


def _example(fmt, i, a_bits, b_bits, got_bits, ref, code: int, over_name: str) -> dict:
    pa, pb, pg = (int(host(x[i:i + 1])[0]) for x in (a_bits, b_bits, got_bits))
    r = float(host(ref[i:i + 1])[0])
    return {"input": f"0x{pa:04x}, 0x{pb:04x}",
            "input_value": [float(fmt.decode(np.array([pa]))[0]),
                            float(fmt.decode(np.array([pb]))[0])],
            "expected": fmt.hex(r), "got": f"0x{pg:04x}",
            "got_value": float(fmt.decode(np.array([pg]))[0]),
            "reason": (REASONS + (over_name, "not-repeatable"))[code], "code": code}


def sweep_pairs(kernel, device: str = "cpu", rows: np.ndarray | None = None,
                progress=None, contract=None, op_contract=None, seed: int = 0) -> dict:
    """The record of a binary kernel's sweep over the pairs of `rows` (default: all 2^16, every
    pair): counts by reason, the worst ulps of a passing result, the first counterexamples (the
    two inputs', expected and returned bits). `kernel` is a LowpKernel or remote.py's stand-in.
    `contract`: its peer's, chosen by the plugin spec (conformance/lowp/conventions.py); the
    results it explains are the record's `differences`, not failures. An op of the plugin's own
    is judged against `op_contract` (a contracts.LoadedContract), once certified on the pairs of
    run seed `seed` (contracts.certify: ReferenceRefusedError else)."""
    from conformance.lowp.conventions import Differences
    if kernel.op not in BINARY and (op_contract is None or op_contract.contract.op != kernel.op):
        raise ValueError(f"{kernel.name}: op {kernel.op!r} is not binary ({', '.join(BINARY)}) "
                         "and no contract of it was given")
    certification = None
    if op_contract is not None:
        from conformance.lowp.contracts import certify
        certification = certify(op_contract, kernel.fmt, seed)
    xp = np
    if device == "cuda":
        import cupy as xp   # the judge's arrays on the GPU; the kernel's run where it runs
    rows = select_rows() if rows is None else np.asarray(rows, dtype=np.uint16)
    over_name = "not-correctly-rounded" if kernel.bound_ulps <= 0.5 else "exceeds-bound"
    tally, step = Tally(), SHARD_ROWS[device]
    differences = None if contract is None else Differences(contract)
    t0 = time.perf_counter()
    shards = [rows[start:start + step] for start in range(0, rows.size, step)]
    try:
        for i, shard in enumerate(shards):
            _judge_shard(kernel, shard, xp, tally, over_name, differences, op_contract,
                         shards[i + 1] if i + 1 < len(shards) else None)
            if progress is not None:
                progress(tally.pairs, rows.size << 16)
    except Exception:
        # a shard asked for ahead is read and dropped: the kernel process's next answer must
        # be to its next request; the sweep's own exception is what the caller gets
        if hasattr(kernel, "drop_prefetch"):
            with contextlib.suppress(Exception):
                kernel.drop_prefetch()
        raise
    names = REASONS + (over_name, "not-repeatable")
    reasons = {names[c]: int(v) for c, v in enumerate(tally.counts) if c and v}
    rec = {"format": LOWP_FORMAT, "kernel": kernel.name, "op": kernel.op, "storage":
           kernel.fmt.name, "bound_ulps": kernel.bound_ulps, "pairs": tally.pairs,
           "exhaustive": tally.pairs == ROWS * ROWS, "judged_on": device,
           "status": "failed" if reasons else "passed", "failed": int(sum(reasons.values())),
           "failure_reasons": reasons, "max_ulps_passing": tally.max_ulps,
           "not_correctly_rounded": tally.not_correctly_rounded,
           "counterexamples": [{k: v for k, v in e.items() if k != "code"}
                               for e in tally.examples], "vjp": None,
           **({} if differences is None else {"differences": differences.record()}),
           "seconds": round(time.perf_counter() - t0, 3)}
    if op_contract is not None:     # the plugin's reference, not ours: trust.py tells them apart
        rec["reference"] = {**op_contract.summary(), "certification": certification,
                            "decided_by_mpmath": tally.decided_by_mpmath}
    return rec
