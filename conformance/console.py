"""What `torchlean-conformance run` prints once its campaign ends: the summary table and the legend
of its err/bound columns, throughput by op family, and for each failing capsule one line per
distinct failure reason, the most telling first, each with the command that replays it (as
Hypothesis prints one falsifying example per distinct failure). The order failure reasons are
listed in (REASON_ORDER) is this module's, and every list of reasons the console prints or a
report page shows uses it (reports/verdicts.py)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

FAILING = ("failed", "crashed", "timed-out", "error", "harness-error", "interrupted")

# The console lists failure reasons in one fixed order, most telling first, never in the order a
# run met them (which varied from run to run): the kernel gave no usable result, then wrong
# special values and broken contracts, then results that are merely too far from the exact one
# (BOUND_EXCESSES). A gradient's reason ("vjp-" + a reason) follows the forward one it mirrors;
# a reason not named here (a new one) goes after the named contract breaks, by name.
REASON_ORDER = ("raised", "wrong-type", "shape-mismatch", "poison-in-output", "nan-mismatch",
                "inf-mismatch", "input-mutated", "not-repeatable", "order-mismatch",
                "unchecked-order-claim", "param-not-rounded", "signed-zero",
                "flushed-subnormal")
BOUND_EXCESSES = ("not-bitwise", "not-correctly-rounded", "exceeds-bound", "identity")
VJP = "vjp-"

LEGEND = (
    "err/bound: the worst error over its bound, failing elements included; at most 1 passes.",
    "  correctly rounded and bitwise ops: |result - exact| in half ulps, so a correctly rounded "
    "result shows up to 1 (1 at a rounding tie, 0 only where it is exact);",
    "  bounded ops (ulps, faithful, gamma, derived bounds): |result - exact| / bound, and 0 where "
    "the result is the correctly rounded one;",
    "  NaN mismatch, inf mismatch: a special value was wrong somewhere, which no ratio measures.")


def _base(reason: str) -> tuple[str, bool]:
    """(the reason without its gradient prefix, whether it is a gradient's)."""
    return (reason[len(VJP):], True) if reason.startswith(VJP) else (reason, False)


def is_bound_excess(reason: str) -> bool:
    """A result too far from the exact one, as opposed to a wrong special value or a broken
    contract."""
    return _base(reason)[0] in BOUND_EXCESSES


def reason_rank(reason: str) -> tuple:
    """The sort key of REASON_ORDER (module docstring)."""
    base, grad = _base(reason)
    if base in REASON_ORDER:
        return (0, REASON_ORDER.index(base), "", grad)
    if base in BOUND_EXCESSES:
        return (2, BOUND_EXCESSES.index(base), "", grad)
    return (1, 0, base, grad)


def ordered_reasons(reasons) -> list:
    """Reason names, or (name, count) pairs of a record's failure_reasons, in REASON_ORDER."""
    items = list(reasons.items()) if isinstance(reasons, dict) else list(reasons)
    return sorted(items, key=lambda r: reason_rank(r[0] if isinstance(r, tuple) else r))


def reasons_text(reasons: dict) -> str:
    """`inf-mismatch x36, exceeds-bound x11`: a record's failure reasons in REASON_ORDER."""
    return ", ".join(f"{name} x{count}" for name, count in ordered_reasons(reasons))


# --- the table ------------------------------------------------------------------------------------

def worst_ratio(rec: dict, side: str) -> float | None:
    """The largest err/bound of one side (forward or vjp), failing elements included."""
    stats = (rec.get("stats") or {}).get(side) or {}
    vals = [stats.get("worst_ratio"), stats.get("worst_ratio_failing")]
    vals = [v for v in vals if isinstance(v, (int, float))]
    return max(vals) if vals else None


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


# The special-value mismatches no err/bound ratio can show (their elements have none), by name;
# the report (reports/verdicts.py) names them with the same words.
MISMATCHES = (("nan-mismatch", "NaN mismatch"), ("inf-mismatch", "inf mismatch"))


def mismatches(reasons: dict, side: str) -> list[tuple[str, int]]:
    """(label, count) of one side's special-value mismatches ("forward" or "vjp")."""
    prefix = VJP if side == "vjp" else ""
    return [(label, reasons[prefix + code]) for code, label in MISMATCHES
            if reasons.get(prefix + code)]


def side_figure(rec: dict, side: str) -> str:
    """A side's summary figure: its special-value mismatches by name where it has any (a ratio
    there would hide them), else its worst err/bound."""
    named = mismatches(rec.get("failure_reasons") or {}, side)
    if named:
        return "+".join(label.split()[0] for label, _ in named) + " mismatch"
    return _ratio(worst_ratio(rec, side))


def summary_table(records: list[dict]) -> str:
    """One row per capsule; worst err/bound per side, failing elements included (LEGEND says what
    the figure is for each kind of error model)."""
    rows = [("capsule", "cases", "fwd err/bound", "vjp err/bound", "status")]
    for r in records:
        rows.append((r.get("capsule", {}).get("name", "?"),
                     str((r.get("cases") or {}).get("total", 0)),
                     side_figure(r, "forward"), side_figure(r, "vjp"),
                     r.get("status", "?")))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def throughput_lines(records: list[dict]) -> list[str]:
    """Cases and elements per second per op family, over the records this run judged."""
    from conformance.families import SPECS
    family = {spec.op.label: spec.summary_group for spec in SPECS}
    fams: dict[str, list[float]] = {}
    for r in records:
        timing, cases = r.get("timing") or {}, r.get("cases") or {}
        seconds = timing.get("seconds")
        if r.get("resumed") or not isinstance(seconds, (int, float)) or seconds <= 0:
            continue
        fam = family.get((r.get("capsule") or {}).get("op"), "other")
        acc = fams.setdefault(fam, [0.0, 0.0, 0.0])
        acc[0] += cases.get("total") or 0
        acc[1] += (cases.get("sizes") or {}).get("elements_total") or 0
        acc[2] += seconds
    return [f"  {fam:20s} {n / t:8.1f} cases/s {e / t:12.0f} elements/s ({t:.1f} s of campaign)"
            for fam, (n, e, t) in sorted(fams.items())]


# --- one line per failure reason ------------------------------------------------------------------

def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def failure_ratio(f: dict) -> float | None:
    """err/bound of one recorded failing element: error over its bound, or for an equality
    model (no bound) its distance in half ulps; None for a whole-output failure."""
    error, bound, ulps = _number(f.get("error")), _number(f.get("bound")), _number(f.get("ulps"))
    if error is not None and bound is not None and bound > 0:
        return error / bound
    if f.get("bound") is None and ulps is not None:
        return 2 * ulps
    return None


@dataclass
class ReasonLine:
    """One distinct failure reason of a record and the counterexample that shows it best."""
    reason: str
    count: int
    counterexample: dict | None     # the record's counterexample shown
    failure: dict | None            # its worst failing element (or whole-output failure) of reason
    ratio: float | None             # that failure's err/bound (bound excesses)
    elements: int                   # input elements of the case its replay runs

    def sort_key(self) -> tuple:
        """Wrong special values and broken contracts first (REASON_ORDER), then bound excesses
        by err/bound, largest first; smaller cases first on ties."""
        rank = reason_rank(self.reason)
        if rank[0] < 2:
            return (0, rank, 0.0, self.elements)
        ratio = self.ratio if self.ratio is not None and not math.isnan(self.ratio) else -1.0
        return (1, (), -ratio, self.elements, rank)


def _replayed(ce: dict) -> dict:
    return ce.get("shrunk") or ce.get("case") or {}


def _of_reason(ce: dict, reason: str) -> list[dict]:
    """The counterexample's failures of `reason`: the replayed (shrunk) case's, else the
    original case's."""
    for key in ("shrunk_failures", "failures"):
        found = [f for f in ce.get(key) or [] if isinstance(f, dict) and f.get("reason") == reason]
        if found:
            return found
    return []


def _worst(failures: list[dict]) -> tuple[dict | None, float | None]:
    if not failures:
        return None, None
    rated = [(failure_ratio(f), f) for f in failures]
    ratio, f = max(rated, key=lambda p: -math.inf if p[0] is None else p[0])
    return f, ratio


def reason_lines(rec: dict) -> list[ReasonLine]:
    """One ReasonLine per failure reason of the record, most telling first (sort_key)."""
    ces = [ce for ce in rec.get("counterexamples") or [] if isinstance(ce, dict)]
    lines = []
    for reason, count in ordered_reasons(rec.get("failure_reasons") or {}):
        shown = [ce for ce in ces if reason in (ce.get("reasons") or [])] or \
            [ce for ce in ces if _of_reason(ce, reason)]
        best = None
        for ce in shown:
            f, ratio = _worst(_of_reason(ce, reason))
            size = _replayed(ce).get("elements")
            line = ReasonLine(reason, count, ce, f, ratio,
                              size if isinstance(size, int) else math.inf)
            if best is None or _better(line, best):
                best = line
        lines.append(best or ReasonLine(reason, count, None, None, None, math.inf))
    return sorted(lines, key=ReasonLine.sort_key)


def _better(a: ReasonLine, b: ReasonLine) -> bool:
    """Between two counterexamples of one reason: the larger err/bound (a bound excess), then
    the smaller case, then one with a replay command."""
    def key(line):
        bounded = is_bound_excess(line.reason) and line.ratio is not None
        return (-(line.ratio if bounded else 0.0), line.elements,
                not (line.counterexample or {}).get("replay_command"))
    return key(a) < key(b)


def _value(v) -> str:
    return f"{v:.9g}" if isinstance(v, float) else str(v)


def failure_text(f: dict, ratio: float | None) -> str:
    """One recorded failure in words: an element's expected and got values and err/bound, or a
    whole-output failure's message (and, for a kernel that raised, where it raised)."""
    if f.get("expected") == "" and not f.get("element"):
        frames = f.get("kernel_frames") or []
        return f"{f.get('output')}: {f.get('got')}" + (f" (at {frames[-1]})" if frames else "")
    text = (f"{f.get('output')}{f.get('element')}: expected {_value(f.get('expected_value'))}, "
            f"got {_value(f.get('got_value'))}")
    if not is_bound_excess(f.get("reason", "")):   # a wrong special value: no measurement
        return text
    if f.get("bound") is None and _number(f.get("ulps")) is not None:
        return text + f", {_value(f.get('ulps'))} ulps from the correctly rounded result"
    return text + ("" if ratio is None else f", err/bound {ratio:.3g}")


def reason_block(line: ReasonLine) -> list[str]:
    """The reason's line (its count, the case replayed, what failed), then the case's note (how
    it was shrunk, or why not) and its replay command."""
    head = f"{line.reason} x{line.count}"
    ce = line.counterexample
    if ce is None:
        return [f"{head}: no counterexample kept"]
    case = _replayed(ce)
    what = "" if line.failure is None else ": " + failure_text(line.failure, line.ratio)
    out = [f"{head}: {case.get('summary', '?')}{what}"]
    if case.get("note"):   # shrunk or not, and why
        out.append(f"  {case['note']}")
    if ce.get("replay_command"):
        out.append(f"  replay: {ce['replay_command']}")
    elif ce.get("shrink_error"):
        out.append(f"  no replay file: the shrinker raised ({ce['shrink_error']})")
    return out


def print_summary(records: list[dict], out: Path) -> None:
    """The table and its legend, throughput, the counts, then each failing capsule's message or
    reasons, one block per distinct reason."""
    print(summary_table(records))
    print("\n".join(LEGEND))
    lines = throughput_lines(records)
    if lines:
        print("\nthroughput by op family (this run's capsules, each in its own worker):")
        print("\n".join(lines))
    bad = [r for r in records if r.get("status") in FAILING]
    print(f"\n{len(records) - len(bad)} of {len(records)} capsules without failures; evidence "
          f"in {out}/")
    print(f"{sum(bool(r.get('resumed')) for r in records)} of {len(records)} capsules resumed "
          "from an earlier run with the same build and settings")
    for r in bad:
        msg = r.get("message") or reasons_text(r.get("failure_reasons") or {})
        print(f"  {r.get('capsule', {}).get('name')}: {r.get('status')}: {msg}")
        for line in reason_lines(r):
            print("\n".join("    " + text for text in reason_block(line)))
