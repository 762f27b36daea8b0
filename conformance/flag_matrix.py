"""The compile-flag matrix's judgement, from stored records: which declared policy facts each NVRTC
flag set breaks (the expectation rule), each cell's verdict, the matrix document (JSON evidence)
and its text table. `torchlean-conformance flags` (conformance/flags_cli.py) runs the campaigns;
this module only reads what they wrote, so it is the same on a machine without a GPU.

Every native-cuda capsule is judged under every set twice where the two differ:
- `own`: against the policy its capsule declares from the flags the build really used
  (engine/providers/native_cuda/capsules.py). It must pass: the policy-from-flags is honest.
- `default-policy`: the same binary, the same cases, judged against the policy the DEFAULT build
  declares: what a user who trusts the default capsule holds if the build silently changed flags.

The expectation rule for a default-policy cell (expectation()):
- the set breaks a fact when the default build promises it and the set's flags withdraw it
  (PROMISES: round=nearest-even, subnormal=gradual-underflow, contract=separate, a finite
  libdevice ulp bound). No fact broken: the cell must pass (the judgement is the own one).
- a broken fact the own-policy run WITNESSED (it counts subnormals flushed in outputs and inputs
  read as zero) must make the cell fail: the same cases, judged against a policy that forbids
  what was observed.
- a broken fact with no witness is `either`: broken on paper, but the campaign saw no instance
  (a copy or a selection has nothing to flush; an FMA is compared bit for bit only against a
  declared fixed order's program). Such cells never decide the exit code; the page and the
  table count them apart, as what the campaign cannot show.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from conformance.formats import FLAG_MATRIX_FORMAT

SCHEMA_VERSION = 1
MATRIX_FILE = "flag-matrix.json"
OWN, DEFAULT_POLICY = "own", "default-policy"
MODES = (OWN, DEFAULT_POLICY)
MUST_PASS, MUST_FAIL, EITHER = "pass", "fail", "either"
MISSING = "missing"

# The facts a default build promises, by the label it declares; a set whose flags declare anything
# else for that fact breaks the promise. (subnormal=implementation-defined, what atomics declare,
# promises nothing a flushing build breaks.)
PROMISES = {"round": ("nearest-even",), "subnormal": ("gradual-underflow",),
            "contract": ("separate",)}
# Why a broken fact may pass unseen: the campaign has no counter for it.
UNWITNESSED = {
    "round": "an approximate division or square root is caught only where its error exceeds "
             "the value model's bound",
    "contract": "an FMA is compared bit for bit only against a declared fixed order's program "
                "(conformance/orders.py); elsewhere it lies within the same error bound",
    "bound": "the build declares a looser bound (or none), and its own-policy run counts nothing "
             "against the default's",
    "subnormal": "the own-policy run flushed no subnormal output and read no input as zero",
}


class FlagMatrixError(Exception):
    """A flag-matrix document or directory that cannot be read (named, with what to do)."""


def _decls() -> dict:
    from engine.providers.native_cuda import capsules
    return {d.capsule_name: d for d in capsules.ALL_DECLARATIONS}


def native_capsules() -> list[str]:
    """Every native-cuda capsule, in declaration order: the capsules NVRTC's flags reach."""
    return list(_decls())


def declared_facts(capsule: str, options: tuple[str, ...]) -> dict[str, str]:
    """What `capsule` declares when its kernels are built with `options`."""
    from engine.providers.native_cuda import capsules
    decl = _decls()[capsule]
    flags = capsules.compile_flags(options)
    pol = capsules.numerical_policy_for(decl, flags)
    bound = capsules.declared_bound(decl, flags)
    return {"round": pol.rounding.label, "subnormal": pol.subnormals.label,
            "contract": pol.contraction.label, "reduce": pol.reduction.label,
            "bound": "none" if bound is None else _bound_text(bound)}


def _bound_text(bound) -> str:
    text = f"{bound.ulps:g} ulp"
    if bound.magnitude_units:
        text += f" + {bound.magnitude_units:g} u|terms|"
    if getattr(bound, "absolute", 0.0):
        text += f" + {bound.absolute:.3g} abs"
    return text


def _options(flag_set: str) -> tuple[str, ...]:
    from engine.runtime import flag_sets
    return flag_sets.options_for(flag_set)


def facts_differ(capsule: str, flag_set: str) -> bool:
    """Whether the default-policy judgement can differ from the own one (so needs its own run)."""
    return declared_facts(capsule, _options("default")) != declared_facts(capsule,
                                                                          _options(flag_set))


def broken_facts(capsule: str, flag_set: str) -> list[str]:
    """The default build's promises (`fact=value`) that `flag_set`'s flags withdraw."""
    default = declared_facts(capsule, _options("default"))
    other = declared_facts(capsule, _options(flag_set))
    broken = [f"{k}={default[k]}" for k, kept in PROMISES.items()
              if default[k] in kept and other[k] != default[k]]
    if default["bound"] != "none" and other["bound"] != default["bound"]:
        broken.append(f"bound={default['bound']}")
    return broken


def witnesses(own: dict | None, own_sweep: dict | None = None) -> dict[str, int]:
    """Instances of each fact's breach the own-policy run counted (campaign and sweep)."""
    obs = (own or {}).get("observed") or {}
    flushed = int(obs.get("subnormals_flushed") or 0) + int(obs.get("inputs_flushed") or 0)
    fwd = (own_sweep or {}).get("forward") or {}
    flushed += sum(int(fwd.get(k) or 0) for k in ("subnormals_flushed", "flushed_accepted",
                                                  "inputs_flushed"))
    return {"subnormal": flushed}


def expectation(mode: str, broken: list[str], seen: dict[str, int]) -> tuple[str, str]:
    """(MUST_PASS | MUST_FAIL | EITHER, why): the rule of the module docstring."""
    if mode == OWN:
        return MUST_PASS, "the policy declared from the build's own flags must hold"
    if not broken:
        return MUST_PASS, "the set withdraws nothing this capsule's default build promises"
    shown = [f"{f} ({seen[f.partition('=')[0]]} instance(s) seen)" for f in broken
             if seen.get(f.partition("=")[0], 0) > 0]
    if shown:
        return MUST_FAIL, "breaks " + ", ".join(shown) + " in the own-policy run's cases"
    why = "; ".join(f"{f}: {UNWITNESSED[f.partition('=')[0]]}" for f in broken)
    return EITHER, f"breaks {', '.join(broken)} on paper, no instance seen ({why})"


# --- reading the records --------------------------------------------------------------------------

def set_dir(root: Path, flag_set: str, mode: str) -> Path:
    return Path(root) / flag_set / mode


def _load(path: Path) -> dict | None:
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FlagMatrixError(f"{path}: unreadable ({exc}); delete it and run `torchlean-"
                              "conformance flags` again") from None
    if not isinstance(doc, dict):
        raise FlagMatrixError(f"{path}: not a JSON object; delete it and run the flags command "
                              "again")
    return doc


def _top(reasons: dict | None) -> str | None:
    if not reasons:
        return None
    name, n = max(reasons.items(), key=lambda kv: (kv[1], kv[0]))
    return f"{name} x{n}"


def short(text: str | None, width: int = 90) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= width else text[:width - 3] + "..."


def verdict(rec: dict | None, sweep: dict | None) -> tuple[str, str | None]:
    """(status, first failure reason): the campaign record's and the sweep's, the worse one."""
    if rec is None:
        return MISSING, "no record: the campaign did not write one"
    status, reason = rec.get("status") or "?", None
    if status == "failed":
        reason = _top(rec.get("failure_reasons")) or short(rec.get("message"))
    elif status != "passed":
        reason = short(rec.get("message")) or status
    if sweep is not None:
        s_status = sweep.get("status") or "?"
        s_reason = _top((sweep.get("forward") or {}).get("reasons")) or s_status
        if s_status == "failed" and status != "failed":
            status, reason = "failed", f"exhaustive: {s_reason}"
        elif s_status != "passed" and status == "passed":
            status, reason = s_status, f"exhaustive: {s_reason}"
    return status, reason


def met(expect: str, status: str) -> bool | None:
    if expect == EITHER:
        return None
    return status == ("passed" if expect == MUST_PASS else "failed")


def flag_set_fingerprint(flag_set: str) -> str:
    """sha256 over every kernel file's source fingerprint (engine.runtime.loader) under the
    set's options."""
    from engine.runtime import loader
    opts = _options(flag_set)
    h = hashlib.sha256()
    for f in loader.source_files():
        h.update(f"{f}:{loader.source_fingerprint(f, opts)}\n".encode())
    return h.hexdigest()


@dataclass
class Plan:
    """What a flags run covers: the sets (default first), capsules and settings."""
    sets: list[str]
    capsules: list[str]
    settings: dict


def cell(root: Path, capsule: str, flag_set: str, mode: str, with_sweep: bool) -> dict:
    own_dir, mode_dir = set_dir(root, flag_set, OWN), set_dir(root, flag_set, mode)
    own = _load(own_dir / f"{capsule}.json")
    own_sweep = _load(own_dir / f"exhaustive-{capsule}.json") if with_sweep else None
    broken = [] if flag_set == "default" else broken_facts(capsule, flag_set)
    source = mode
    if mode == OWN or flag_set == "default" or not facts_differ(capsule, flag_set):
        rec, sweep, source = own, own_sweep, OWN      # the same judgement: one run serves both
    else:
        rec = _load(mode_dir / f"{capsule}.json")
        sweep = _load(mode_dir / f"exhaustive-{capsule}.json") if with_sweep else None
    status, reason = verdict(rec, sweep)
    expect, why = expectation(mode, broken, witnesses(own, own_sweep))
    return {"status": status, "reason": reason, "expect": expect, "why": why,
            "met": met(expect, status), "broken": broken,
            "record": str(Path(flag_set) / source / f"{capsule}.json"),
            "exhaustive": None if sweep is None else sweep.get("status")}


def assemble(root: Path, plan: Plan) -> dict:
    """The matrix document from the records under `root` (set_dir's layout)."""
    rows, unmet = [], []
    counts = {"cells": 0, "met": 0, "unmet": 0, "either": 0, "either_passed": 0}
    by_set = {s: {"passed": 0, "failed": 0, "other": 0} for s in plan.sets}
    for capsule in plan.capsules:
        cells = {}
        for s in plan.sets:
            modes = (OWN,) if s == "default" else MODES
            cells[s] = {m: cell(root, capsule, s, m, plan.settings.get("exhaustive", False))
                        for m in modes}
            for m, c in cells[s].items():
                counts["cells"] += 1
                key = c["status"] if c["status"] in ("passed", "failed") else "other"
                by_set[s][key] += 1
                if c["met"] is None:
                    counts["either"] += 1
                    counts["either_passed"] += c["status"] == "passed"
                elif c["met"]:
                    counts["met"] += 1
                else:
                    counts["unmet"] += 1
                    unmet.append(f"{capsule} under {s} ({m}): expected to "
                                 f"{c['expect']} ({c['why']}), got {c['status']}"
                                 + (f": {c['reason']}" if c["reason"] else ""))
        rows.append({"capsule": capsule, "cells": cells})
    return {"format": FLAG_MATRIX_FORMAT, "schema_version": SCHEMA_VERSION, "settings": plan.settings,
            "sets": [{"name": s, "options": list(_options(s)), "fingerprint": flag_set_fingerprint(s),
                      "evidence": {m: str(Path(s) / m) for m in
                                   ((OWN,) if s == "default" else MODES)}}
                     for s in plan.sets],
            "rows": rows, "counts": {**counts, "by_set": by_set}, "unmet": unmet}


def exit_code(matrix: dict) -> int:
    """1 when a cell that must fail passed or one that must pass did not, else 0."""
    return 1 if matrix["counts"]["unmet"] else 0


def write(root: Path, matrix: dict) -> Path:
    from conformance.evidence import write_atomic
    path = Path(root) / MATRIX_FILE
    write_atomic(path, matrix)
    return path


# --- the text table ---------------------------------------------------------------------------

def _cell_text(c: dict) -> str:
    mark = {True: "", False: "!! ", None: "~ "}[c["met"]]
    text = c["status"] + (f": {c['reason']}" if c["reason"] and c["status"] != "passed" else "")
    return mark + short(text, 34)


def table(matrix: dict) -> str:
    """Capsules down; each set's own-policy column, then its default-policy column."""
    cols = [(s["name"], m) for s in matrix["sets"]
            for m in ((OWN,) if s["name"] == "default" else MODES)]
    head = ["capsule"] + [s if s == "default" else f"{s} ({'own' if m == OWN else 'default pol.'})"
                          for s, m in cols]
    rows = [head] + [[r["capsule"]] + [_cell_text(r["cells"][s][m]) for s, m in cols]
                     for r in matrix["rows"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    c = matrix["counts"]
    lines += ["", "!! an expectation not met; ~ the set breaks a declared fact the campaign saw "
                  "no instance of (either verdict is allowed)",
              f"{c['cells']} cells: {c['met']} as expected, {c['unmet']} not, {c['either']} "
              f"either ({c['either_passed']} of them passed: broken on paper, not shown)"]
    lines += [f"  {u}" for u in matrix["unmet"]]
    return "\n".join(lines)
