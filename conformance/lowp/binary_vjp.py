"""The VJP of a binary 16-bit kernel of ours (add, sub, mul, max, min: `vjp(a, b, g) -> (ga, gb)`,
arrays of the format), swept over every value its rule depends on where that is two 16-bit values
or fewer, and sampled where it is not. The rules are TorchLean's (docs/OPS.md), each reference
exact in float64 before one rounding to the format:
- add: (g, g); sub: (g, -g): copies, no rounding;
- mul: (g b, g a), each rounded once (a product of two 16-bit values is exact in float64);
- max (min): g to the larger (smaller) operand and +0 to the other (the engine's zeros,
  engine/ops/elementwise.py _select_vjp); on a tie (a == b, -0 against +0 included) g / 2 to each,
  rounded once (g / 2 is exact in float64); where either operand is NaN, g to the NaN one(s) and
  +0 to the other.
Every result is judged as a forward result (binary.classify_against, `vjp_bound_ulps`: 0.5 asks
for the reference's bits, zeros' signs included); reasons `vjp-...`.

The sweep runs PASSES, each over shards of rows as the forward sweep's: in row r, element x, each
input is (m x + k) mod 2^16 for the row's multiplier m and offset k (kernel.triple_inputs, made by
the kernel process and again here), so an input runs over `every` pattern (m = 1), over a
`shuffled` permutation of them (odd m and k drawn per row from the run seed), holds the `row`'s
pattern, one `drawn` per row from the run seed, or `one` (1.0):
- add, sub: the gradients depend on g alone: every g in each row, with a set to a special
  pattern (zero, subnormal, infinity, NaN, ...: formats.SPECIALS), b drawn: exhaustive over
  g; the (a, b) are a sample on which a kernel that reads them would show it;
- mul: ga = g b: every g against every b of the sweep's rows, a drawn ("ga over (g, b)"); gb:
  the operands' roles exchanged ("gb over (g, a)"). With all 2^16 rows each pass is exhaustive over
  its pair; the other gradient of each pass is judged too, at its drawn operand (a sample of it at
  other values). A VJP that swaps g a and g b fails both;
- max, min: the gradients depend on (a, b, g): every a against every b of the sweep's rows at
  g = 1 ("g = 1 over (a, b)": the routing, ties and NaN rules, exhaustive with all rows), and g
  shuffled on the rows of select_rows(SAMPLE_STRIDE) ("g drawn": g / 2's rounding, signs, NaN g):
  a sample, so a max or min VJP is never `verified` (trust.py).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from conformance.lowp.binary import (ROWS, SHARD_ROWS, Tally, classify_against,
                                     explain_failing, select_rows, tally_shard)
from conformance.lowp.formats import SPECIALS, Format, host
from conformance.lowp.kernel import triple_inputs
from conformance.lowp.sweep import REASONS, as_verdict, check_form

SAMPLE_STRIDE = 4099        # max and min's sample of g: 16 rows of b and the 24 special ones
OUTPUTS = ("ga", "gb")


@dataclass(frozen=True)
class Pass:
    """One pass of a VJP sweep: the role of each input (a, b, g), whose rows it runs over, and
    what it covers completely (nothing: a sample)."""
    name: str
    roles: tuple[str, str, str]     # each "every", "shuffled", "row", "drawn" or "one"
    rows: str                       # "selected" (the sweep's), "specials" or "sample"
    exhaustive_over: tuple[str, ...]


_G_ALONE = (Pass("every g", ("row", "drawn", "every"), "specials", ("g",)),)
_SELECT = (Pass("g = 1 over (a, b)", ("every", "row", "one"), "selected", ("a", "b")),
           Pass("g drawn", ("every", "row", "shuffled"), "sample", ()))
PASSES = {"add": _G_ALONE, "sub": _G_ALONE,
          "mul": (Pass("ga over (g, b)", ("drawn", "row", "every"), "selected", ("g", "b")),
                  Pass("gb over (g, a)", ("row", "drawn", "every"), "selected", ("g", "a"))),
          "max": _SELECT, "min": _SELECT}


def complete(p: Pass, evaluations: int) -> bool:
    """Whether a pass of `evaluations` calls' elements covered what it is exhaustive over: every
    pattern of its one variable (a row holds them all), or all 2^32 pairs of its two."""
    if not p.exhaustive_over:
        return False
    return evaluations >= ROWS if len(p.exhaustive_over) == 1 else evaluations == ROWS * ROWS


def vjp_reference(op: str, fmt: Format, a, b, g, xp=np):
    """((ga, gb) correctly rounded, (ga, gb) exact) as float64 values, NumPy or CuPy."""
    with np.errstate(all="ignore"):     # inf * 0 and the like: IEEE's NaN, on purpose
        if op in ("add", "sub"):
            pair = (g, g if op == "add" else -g)
            return pair, pair
        if op == "mul":
            exact = (g * b, g * a)
            return tuple(fmt.round(e, xp) for e in exact), exact
        a_wins = (a > b) if op == "max" else (a < b)
        tie, nan_a, nan_b = a == b, xp.isnan(a), xp.isnan(b)

        def routed(half):
            ga = xp.where(tie, half, xp.where(a_wins, g, 0.0))
            gb = xp.where(tie, half, xp.where(a_wins, 0.0, g))
            either = nan_a | nan_b
            return (xp.where(either, xp.where(nan_a, g, 0.0), ga),
                    xp.where(either, xp.where(nan_b, g, 0.0), gb))
        return routed(fmt.round(g * 0.5, xp)), routed(g * 0.5)


def row_inputs(p: Pass, rows: np.ndarray, fmt: Format, rng) -> tuple[np.ndarray, np.ndarray]:
    """(multipliers, offsets), each (3, rows) uint16, of a pass's inputs (a, b, g) on `rows`."""
    n = rows.size
    mults, adds = np.zeros((3, n), np.uint16), np.zeros((3, n), np.uint16)
    for i, role in enumerate(p.roles):
        if role == "every":
            mults[i] = 1
        elif role == "row":
            adds[i] = rows
        elif role == "drawn":
            adds[i] = rng.integers(0, 1 << 16, n)
        elif role == "one":
            adds[i] = fmt.encode(np.array([1.0]))[0]
        else:    # shuffled: an odd multiplier is a permutation of the patterns modulo 2^16
            mults[i] = rng.integers(0, 1 << 15, n) * 2 + 1
            adds[i] = rng.integers(0, 1 << 16, n)
    return mults, adds


def _judge_shard(kernel, p: Pass, mults, adds, xp, tally: Tally, bound: float,
                 over_name: str, differences=None) -> None:
    fmt, n = kernel.fmt, mults.shape[1] << 16
    what = kernel.name + " VJP"
    bits, differ, where = as_verdict(what, lambda: kernel.call_triples(mults, adds))
    bits = np.asarray(bits)
    check_form(what, bits, (2, n), f"the {n} (a, b, g) of its pass `{p.name}`", fmt)
    inputs = triple_inputs(mults, adds, xp)
    a, b, g = (fmt.decode(x, xp) for x in inputs)
    got_bits = xp.asarray(bits)
    got = fmt.decode(got_bits, xp)
    refs, exacts = vjp_reference(kernel.op, fmt, a, b, g, xp)
    ref, exact = xp.stack(refs), xp.stack(exacts)
    code, ulps = classify_against(fmt, bound, got, ref, exact, xp)
    explained = 0 if differences is None else sum(     # each gradient under its rule
        explain_failing(differences, "vjp", fmt, inputs, (a, b), got_bits[out], got[out],
                        ref[out], code[out], ulps[out], xp, g, out, OUTPUTS[out])
        for out in (0, 1))

    def example(i: int, c: int) -> dict:
        out, j = divmod(i, n)
        pa, pb, pg = (int(host(x[j:j + 1])[0]) for x in inputs)
        r, mine = float(host(ref[out, j:j + 1])[0]), int(host(got_bits[out, j:j + 1])[0])
        col = j >> 16
        return {"input": f"0x{pa:04x}, 0x{pb:04x}, 0x{pg:04x}",
                "input_value": [float(fmt.decode(np.array([v]))[0]) for v in (pa, pb, pg)],
                "output": OUTPUTS[out], "pass": p.name,
                "row": {"mults": [int(v) for v in mults[:, col]],
                        "adds": [int(v) for v in adds[:, col]]}, "element": j & 0xffff,
                "expected": fmt.hex(r), "got": f"0x{mine:04x}",
                "got_value": float(fmt.decode(np.array([mine]))[0]),
                "reason": "vjp-" + (REASONS + (over_name, "not-repeatable"))[c], "code": c}
    tally_shard(tally, fmt, code, ulps, got, ref, differ, where, xp, example, explained)


def sweep_vjp(kernel, device: str = "cpu", rows: np.ndarray | None = None,
              seed: int = 0, contract=None) -> dict:
    """The record of a binary kernel's VJP sweep (this module's docstring), the `vjp` part of its
    record: counts by reason (`vjp-...`), the worst passing ulps, the first counterexamples (the
    three inputs, which gradient, the pass and its row), and each pass's coverage. `rows`: the
    forward sweep's selection (binary.select_rows); `seed`: the run seed of the drawn inputs;
    `contract`: its peer's, chosen by the plugin spec (conformance/lowp/conventions.py): the
    gradients it explains are the record's `differences`, not failures."""
    from conformance.lowp.conventions import Differences
    if kernel.op not in PASSES:
        raise ValueError(f"{kernel.name}: no VJP sweep of op {kernel.op!r} ({', '.join(PASSES)})")
    xp = np
    if device == "cuda":
        import cupy as xp
    fmt = kernel.fmt
    rows = select_rows() if rows is None else np.asarray(rows, dtype=np.uint16)
    own = getattr(kernel, "vjp_bound_ulps", None)
    bound = kernel.bound_ulps if own is None else own
    over_name = "not-correctly-rounded" if bound <= 0.5 else "exceeds-bound"
    rng = np.random.default_rng([seed, 0x7a3b, fmt.precision])
    tally, step, passes = Tally(), SHARD_ROWS[device], []
    differences = None if contract is None else Differences(contract)
    t0 = time.perf_counter()
    for p in PASSES[kernel.op]:
        on = {"selected": rows, "specials": np.array(SPECIALS, dtype=np.uint16),
              "sample": select_rows(SAMPLE_STRIDE)}[p.rows]
        mults, adds = row_inputs(p, on, fmt, rng)
        for start in range(0, on.size, step):
            _judge_shard(kernel, p, mults[:, start:start + step], adds[:, start:start + step],
                         xp, tally, bound, over_name, differences)
        evaluations = on.size << 16
        passes.append({"name": p.name, "inputs": dict(zip("abg", p.roles)), "rows": int(on.size),
                       "evaluations": evaluations, "exhaustive_over": list(p.exhaustive_over),
                       "complete": complete(p, evaluations)})
    names = REASONS + (over_name, "not-repeatable")
    reasons = {"vjp-" + names[c]: int(v) for c, v in enumerate(tally.counts) if c and v}
    return {"part": "vjp", "bound_ulps": bound, "failed": int(sum(reasons.values())),
            "failure_reasons": reasons, "max_ulps_passing": tally.max_ulps,
            "not_correctly_rounded": tally.not_correctly_rounded,
            "counterexamples": [{k: v for k, v in e.items() if k != "code"}
                                for e in tally.examples],
            "passes": passes, "exhaustive": all(q["complete"] for q in passes),
            "run_seed": seed, "seconds": round(time.perf_counter() - t0, 3),
            **({} if differences is None else {"differences": differences.record()})}


def with_vjp(rec: dict, vjp: dict) -> dict:
    """The forward record `rec` with its VJP's part: its reasons and counterexamples joined to
    the forward's (as a unary sweep's are), the status from both."""
    from conformance.lowp.conventions import merge_records
    reasons = {**rec["failure_reasons"], **vjp["failure_reasons"]}
    out = {**rec, "status": "failed" if reasons else "passed", "failure_reasons": reasons,
           "counterexamples": rec["counterexamples"] + vjp["counterexamples"],
           "vjp": {k: v for k, v in vjp.items() if k != "differences"},
           "seconds": round(rec["seconds"] + vjp["seconds"], 3)}
    differences = merge_records(rec.get("differences"), vjp.get("differences"))
    if differences:     # the forward's and the VJP's, one list (trust and the page read it)
        out["differences"] = differences
    return out
