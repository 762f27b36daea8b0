"""What an evidence record must agree with before it counts: itself, and its place.

Itself: a campaign's status follows from its counts (conformance/campaign.py: `failed` when a
case failed, else `harness-error` when the harness raised, else `passed`), so trust and the report
recompute it from the per-case counts, the failure reasons and the worst error/bound, and refuse a
record whose `status`, counts and statistics disagree. Its place: the file is `<capsule
name>.json` (conformance/evidence_dir.py: record_path), and the capsule it names has the op,
provider and device of the capsule of that name, on the evidence directory's device.

Plain data in, sentences out: no engine import, so the report can use it anywhere.
"""
from __future__ import annotations

from pathlib import Path

# The statuses a campaign derives from its counts; the others (crashed, timed-out, interrupted,
# unsupported) are written by the runner for a campaign that gave no counts.
COUNTED = ("passed", "failed", "harness-error")
SIDES = ("forward", "vjp")


def _count(value) -> int:
    """A count as the record holds it (a non-integer counts as nothing: the schema checks
    types, this module checks agreement)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("inf", "-inf", "nan"):     # how evidence.py writes non-finite floats
        return float("inf")
    return None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _flush_allowed(rec: dict, side: str) -> bool:
    """Whether a side's error model lets a subnormal result flush to zero. A flushed element
    then passes at any distance (error_models.compare resets its reason and keeps its ratio), so
    a passing record's worst error/bound may exceed 1 there: it does in the flush-to-zero
    builds under evidence/h200-flags/. Everywhere else a passing element's ratio is at most 1."""
    models = _dict(_dict(rec.get("error_model")).get(side))
    return any(_dict(m).get("flush_allowed") is True for m in models.values())


def failing_evidence(rec: dict) -> list[str]:
    """Everything in a record that says some case failed."""
    cases = _dict(rec.get("cases"))
    out = []
    if _count(cases.get("failed")):
        out.append(f"cases.failed is {cases['failed']}")
    reasons = {k: v for k, v in _dict(rec.get("failure_reasons")).items() if _count(v)}
    if reasons:
        out.append("failure_reasons lists " + ", ".join(f"`{k}` x{v}" for k, v in
                                                        sorted(reasons.items())))
    if isinstance(rec.get("counterexamples"), list) and rec["counterexamples"]:
        out.append(f"{len(rec['counterexamples'])} counterexample(s) are recorded")
    if _count(_dict(rec.get("identity")).get("failed")):
        out.append("the inner-product identity failed")
    for side in SIDES:
        stats = _dict(_dict(rec.get("stats")).get(side))
        failing = _number(stats.get("worst_ratio_failing"))
        if failing is not None:
            out.append(f"its {side} statistics hold failing elements (worst error/bound "
                       f"{stats['worst_ratio_failing']})")
        worst = _number(stats.get("worst_ratio"))
        if worst is not None and worst > 1 and not _flush_allowed(rec, side):
            out.append(f"its {side} worst error is {stats['worst_ratio']} times the bound")
    return out


def harness_error_count(rec: dict) -> int:
    cases = _dict(rec.get("cases"))
    by_class = sum(_count(_dict(c).get("harness_errors"))
                   for c in _dict(cases.get("by_class")).values())
    return max(_count(cases.get("harness_errors")), by_class)


def derived_status(rec: dict) -> str | None:
    """The status a campaign record's counts give (None: no verdict, no case was judged); a
    runner's status (crashed, timed-out, interrupted, unsupported) as it is."""
    status = rec.get("status")
    if status not in COUNTED:
        return status
    if failing_evidence(rec):
        return "failed"
    if harness_error_count(rec):
        return "harness-error"
    return "passed" if _count(_dict(rec.get("cases")).get("total")) > 0 else None


def _sum_problems(cases: dict) -> list[str]:
    """cases.total, failed, skipped and harness_errors against the sums over by_class."""
    by_class = [_dict(c) for c in _dict(cases.get("by_class")).values()]
    out = []
    for total, per_class in (("total", "run"), ("failed", "failed"), ("skipped", "skipped"),
                             ("harness_errors", "harness_errors")):
        if not isinstance(cases.get(total), int) or not by_class or \
                not all(isinstance(c.get(per_class), int) for c in by_class):
            continue       # absent in the record's version, or a type the schema check names
        summed = sum(c[per_class] for c in by_class)
        if cases[total] != summed:
            out.append(f"cases.{total} is {cases[total]} but its classes' `{per_class}` add up "
                       f"to {summed}")
    return out


def contradictions(rec: dict) -> list[str]:
    """Every way a record contradicts itself (empty: it agrees with itself). The status is
    recomputed from the counts (derived_status) and must be the one it states."""
    cases = _dict(rec.get("cases"))
    out = _sum_problems(cases)
    status = rec.get("status")
    if status not in COUNTED:
        return out
    failing = failing_evidence(rec)
    derived = derived_status(rec)
    if derived == status == "failed" and not _count(cases.get("failed")):
        out.append("no case failed (cases.failed is 0) but " + "; ".join(failing))
    if _count(cases.get("failed")) and not _dict(rec.get("failure_reasons")):
        out.append(f"cases.failed is {cases['failed']} but failure_reasons is empty")
    judged = _count(cases.get("total"))
    if not judged:
        elements = [s for s in SIDES if _count(_dict(_dict(rec.get("stats")).get(s))
                                               .get("elements"))]
        if elements:
            out.append(f"no case was judged (cases.total is 0) but its {' and '.join(elements)} "
                       "statistics hold elements")
    if derived != status:
        why = {"failed": "; ".join(failing),
               "harness-error": f"{harness_error_count(rec)} case(s) raised in the harness",
               "passed": "no case failed and the harness never raised",
               None: "no case was judged (cases.total is 0)"}[derived]
        out.append(f"status is `{status}` but {why}")
    if status == "passed" and isinstance(rec.get("harness_errors"), list) and \
            rec["harness_errors"]:
        out.append(f"status is `passed` but harness_errors lists {len(rec['harness_errors'])}")
    return out


def misnamed(rec: dict, file) -> str | None:
    """Why a record's file name is not its capsule's (`<capsule name>.json`), or None."""
    name = _dict(rec.get("capsule")).get("name")
    if name == Path(file).stem:
        return None
    return f"it names capsule `{name}` but its file is {Path(file).name} (a record is " \
           "<capsule name>.json)"


def misplacement(rec: dict, file=None, capsule: dict | None = None,
                 device: str | None = None) -> list[str]:
    """Every way a record names another capsule than its place: its `file` (when given) is not
    `<capsule name>.json`; `capsule` (name, op, provider, device of the capsule of that name,
    when known) differs; or its device is not `device`, the evidence directory's (when known)."""
    named = _dict(rec.get("capsule"))
    wrong_name = None if file is None else misnamed(rec, file)
    out = [wrong_name] if wrong_name else []
    for key in ("op", "provider", "device"):
        if capsule is not None and capsule.get(key) is not None and \
                named.get(key) != capsule.get(key):
            out.append(f"it names {key} `{named.get(key)}` but capsule `{capsule.get('name')}` "
                       f"has {key} `{capsule.get(key)}`")
    said = any(m.startswith("it names device") for m in out)
    if device is not None and named.get("device") != device and not said:
        out.append(f"it names device `{named.get('device')}` but the evidence directory holds "
                   f"{device} evidence")
    return out


def refusal(rec: dict, file, capsule: dict | None = None, device: str | None = None) -> str | None:
    """Why a record is refused ("contradicts itself: ..."; "is misplaced: ..."), or None."""
    parts = []
    wrong = contradictions(rec)
    if wrong:
        parts.append("contradicts itself: " + "; ".join(wrong))
    misplaced = misplacement(rec, file, capsule, device)
    if misplaced:
        parts.append("names another capsule than its place: " + "; ".join(misplaced))
    return "; ".join(parts) or None
