"""The VJP part of an accumulating 16-bit kernel's audit (audit.py), for a kernel that brings
vjp(*inputs, g) -> one gradient per input: cases and cotangents drawn from the run seed the
kernel process never sees (from a stream of their own, so that the forward's cases are those of
the same kernel without a VJP), each gradient judged element by element against the exact one
rounded to the format within the derived float32 bound (accumulate_vjp.py), every call made twice
(`not-repeatable`). Reasons are `vjp-...`; the part is recorded as the record's `vjp`, beside the
forward, as a unary kernel's VJP sweep is.

Classes: the forward's input classes with a normal cotangent (the long class of matmul, linear
and attention made long along the VJP's own reductions: m and n, the queries, which the
forward's long k, or its 4 queries, are not), then
cotangent classes on normal inputs: wide magnitudes, cancellation (sums of g along its rows and
its columns cancel to noise), a constant g (a loss that sums the outputs; softmax's exact
gradient is then 0), and special values (NaN and -0; infinities too where the VJP is sums of
exact products, sum, matmul and linear: elsewhere whether inf meets a weight that underflowed to
0, NaN, or one that did not, -inf, is the evaluation's accident)."""
from __future__ import annotations

import numpy as np

from conformance.lowp.accumulate_vjp import GRADIENTS, cotangent_shape, judge_vjp
from conformance.lowp.cases import CASES_PER_CLASS, COUNTEREXAMPLES, cancel, signed
from conformance.lowp.cases import classes as forward_classes
from conformance.lowp.cases import draw as draw_forward
from conformance.lowp.formats import Format
from conformance.lowp.sweep import LowpKernelError, as_verdict, check_form, mark_unrepeatable

VJP_STREAM = 0x766A70       # "vjp": the second word of the VJP's seed sequence
COTANGENT_CLASSES = ("cotangent-wide", "cotangent-cancellation", "cotangent-constant",
                     "cotangent-special")
EXACT_PRODUCTS = ("sum", "matmul", "linear")


class UnjudgeableVjpError(ValueError):
    """A VJP declared where the harness has no error model for it."""


def classes(op: str) -> tuple[str, ...]:
    return forward_classes(op) + COTANGENT_CLASSES


def _long_inputs(op: str, fmt: Format, rng) -> list[np.ndarray]:
    """matmul and linear: m = n = 256, k = 4: da and dx sum over n, db, dw and linear's db over
    m (a bfloat16 accumulator stalls by 256 terms of 1). attention: 128 queries and keys, d = 32:
    dq sums over the keys, dk and dv over the queries."""
    m = n = 256
    if op == "attention":
        return [fmt.round(rng.standard_normal((128, 32))) for _ in range(3)]
    if op == "matmul":
        return [fmt.round(rng.standard_normal((m, 4))), fmt.round(rng.standard_normal((4, n)))]
    return [fmt.round(rng.standard_normal(s)) for s in ((m, 4), (n, 4), (n,))]


def _cotangent(op: str, cls: str, shape: tuple, rng) -> np.ndarray:
    if cls == "cotangent-wide":
        return signed(rng, shape, -12, 12)
    if cls == "cotangent-constant":
        return np.full(shape, rng.choice([1.0, -0.5, 3.0]))
    if cls == "cotangent-cancellation":
        if len(shape) == 1:
            return cancel(rng, 1, shape[0])[0]
        # u v^T with u and v in opposite pairs: every row and column sums to 0, then noise
        u, v = cancel(rng, 1, shape[0])[0], cancel(rng, 1, shape[1])[0]
        return np.outer(u, v) + 1e-3 * rng.standard_normal(shape)
    g = rng.standard_normal(shape)
    if cls == "cotangent-special":
        values = (np.nan, np.inf, -np.inf, -0.0) if op in EXACT_PRODUCTS else (np.nan, -0.0)
        flat = g.reshape(-1)
        picks = rng.choice(flat.size, min(len(values), flat.size), replace=False)
        flat[picks] = values[:picks.size]          # each special once, at a drawn place
    return g


def draw(op: str, fmt: Format, cls: str, rng) -> tuple[list[np.ndarray], np.ndarray]:
    """One VJP case: (the inputs, the cotangent), float64 values of the format."""
    if cls in COTANGENT_CLASSES:
        xs = draw_forward(op, fmt, "normal", rng)
    elif cls == "long" and op in ("matmul", "linear", "attention"):
        xs = _long_inputs(op, fmt, rng)
    else:
        xs = draw_forward(op, fmt, cls, rng)
    return xs, fmt.round(_cotangent(op, cls, cotangent_shape(op, xs), rng))


def _form(what: str, out, shapes: list[tuple], where: str, fmt: Format) -> list[np.ndarray]:
    """The gradients' bit patterns (`out`: call_bits's answer), each checked for form, each of
    its input's shape (LowpKernelError otherwise)."""
    if not isinstance(out, (tuple, list)):
        out = (out,) if len(shapes) == 1 else out
    if not isinstance(out, (tuple, list)) or len(out) != len(shapes):
        got = f"{len(out)} arrays" if isinstance(out, (tuple, list)) else type(out).__name__
        raise LowpKernelError(f"{what} returned {got} for {where}; expected a tuple of "
                              f"{len(shapes)} {fmt.name} gradients of shapes "
                              f"{[list(s) for s in shapes]}, one per input, each of its shape")
    arrays = [np.asarray(o) for o in out]
    for i, (a, shape) in enumerate(zip(arrays, shapes)):
        if a.dtype == np.uint16 and a.shape != tuple(shape):
            raise LowpKernelError(f"{what} returned a {fmt.name}{list(a.shape)} gradient for "
                                  f"input {i} for {where}; expected {fmt.name}{list(shape)}, "
                                  "the input's own shape")
        check_form(what, a, shape, where, fmt)
    return arrays


def call_vjp_twice(kernel, bits: list, shapes: list[tuple], where: str):
    """(the gradients' bits of a first call, a second call's or None where its form was
    wrong); the first call's raise or form is the kernel's verdict (LowpKernelError)."""
    what = kernel.name + " VJP"
    first, second = as_verdict(what, lambda: tuple(kernel.call_bits(*bits, part="vjp")
                                                   for _ in range(2)))
    got = _form(what, first, shapes, where, kernel.fmt)
    try:
        again = _form(what, second, shapes, where, kernel.fmt)
    except LowpKernelError:
        again = None
    return got, again


def audit_vjp(kernel, seed: int) -> dict:
    """The VJP part of the record (see the module's docstring); a failure of the kernel's own
    (a raise, a wrong form, a write into its inputs) as LowpKernelError with a `vjp-` reason."""
    if kernel.accumulation != "float32":
        raise UnjudgeableVjpError(
            f"{kernel.name} declares a VJP with {kernel.accumulation} accumulation; the VJPs of "
            "accumulating ops are judged under float32 accumulation only: declare "
            "accumulation='float32' or drop the VJP")
    try:
        return _audit_vjp(kernel, seed)
    except LowpKernelError as exc:
        reason = exc.reason if exc.reason.startswith("vjp-") else "vjp-" + exc.reason
        raise LowpKernelError(str(exc), reason) from exc


def _audit_vjp(kernel, seed: int) -> dict:
    fmt, op = kernel.fmt, kernel.op
    rng = np.random.default_rng([seed, VJP_STREAM])
    by_class, reasons, examples, elements = {}, {}, [], 0
    for cls in classes(op):
        run = failed = 0
        for i in range(CASES_PER_CLASS):
            xs, g = draw(op, fmt, cls, rng)
            bits = [fmt.encode(x) for x in xs] + [fmt.encode(g)]
            got_bits, again = call_vjp_twice(kernel, bits, [x.shape for x in xs], f"{cls}[{i}]")
            verdicts = judge_vjp(op, fmt, xs, g, [fmt.decode(b) for b in got_bits])
            run += 1
            case_failed = False
            for k, (reason, ref, _) in enumerate(verdicts):
                mine = got_bits[k]
                mark_unrepeatable(reason, mine, again[k] if again is not None else
                                  np.empty((0,) * (mine.ndim + 1), dtype=np.uint16))
                elements += reason.size
                bad = reason != ""
                if not bad.any():
                    continue
                case_failed = True
                for r, n in zip(*np.unique(reason[bad].astype(str), return_counts=True)):
                    r = "vjp-" + str(r)
                    reasons[r] = reasons.get(r, 0) + int(n)
                    if len(examples) < COUNTEREXAMPLES and all(e["reason"] != r
                                                               for e in examples):
                        at = tuple(int(j) for j in np.argwhere(reason == r[4:])[0])
                        got = fmt.decode(mine)
                        examples.append({"class": cls, "index": i, "gradient": GRADIENTS[op][k],
                                         "element": list(at),
                                         "shapes": [list(x.shape) for x in xs + [g]],
                                         "reason": r, "expected": fmt.hex(ref[at]),
                                         "got": f"0x{int(mine[at]):04x}",
                                         "got_value": float(got[at]),
                                         "expected_value": float(ref[at]),
                                         "_inputs": xs + [g]})   # for the replay (replay.py)
            failed += case_failed
        by_class[cls] = {"run": run, "failed": failed}
    failed_cases = sum(c["failed"] for c in by_class.values())
    return {"cases": {"total": sum(c["run"] for c in by_class.values()), "failed": failed_cases,
                      "by_class": by_class},
            "failed": failed_cases, "elements": elements, "failure_reasons": reasons,
            "counterexamples": examples}


def merge(rec: dict, part: dict) -> None:
    """The VJP part into the audit's record, as a unary sweep records its VJP's: beside the
    forward under `vjp`, its reasons and counterexamples among the record's."""
    rec["vjp"] = part
    rec["failure_reasons"] = {**rec["failure_reasons"], **part["failure_reasons"]}
    rec["counterexamples"] = rec["counterexamples"] + part["counterexamples"]
    if part["failed"]:
        rec["status"] = "failed"
