"""The ulp table built from exhaustive sweep records (<evidence-dir>/ulp-table.json) and printed
as fixed-width text: functions down; ours, PyTorch, CuPy, JAX and NVIDIA's documented figure
across.

A cell is one record's forward side (conformance/exhaustive/judge.py's Tally): the largest
distance in ulps from the correctly rounded float32 value over the inputs judged and the input
where it occurs, the results not correctly rounded, subnormal results flushed to zero and
subnormal inputs read as zero (counted apart: a flushed result is not in the maximum when the
capsule's policy lets it flush), NaN, infinity and signed-zero mismatches, the failures by reason,
the documented bound and the seconds. A sweep measures from the correctly rounded value and NVIDIA
from the exact one: a function within b ulps of the exact value is within b + 1/2 of the rounded
one, so a cell is within its documented figure when its maximum is at most b + 1/2. A cell with no
sweep says why (`na`)."""
from __future__ import annotations

import datetime as _dt

from conformance.ulp_table import function_of

TABLE_VERSION = 1
WIDTH = 15
FIRST = 16
NVIDIA = "nvidia"


def _variant(name: str, prefix: str, function) -> str | None:
    """None for the column's main capsule of the function, else its variant's name."""
    for key in (function.name, function.label):
        if name == f"{prefix}.{key}":
            return None
        if name.startswith(f"{prefix}.{key}."):
            return name[len(prefix) + len(key) + 2:]
    return name


def _declared(rec: dict) -> tuple[float | None, str]:
    value = ((rec.get("capsule") or {}).get("contracts") or {}).get("value") or {}
    bound = value.get("declared_bound")
    if not bound:
        return None, "none documented"
    return float(bound["ulps"]), str(bound.get("reason", ""))


def cell(rec: dict, record_name: str) -> dict:
    """The cell of one sweep record (module docstring)."""
    fwd = rec.get("forward") or {}
    ref = (rec.get("reference") or {}).get("forward") or {}
    documented, source = _declared(rec)
    policy = ((rec.get("capsule") or {}).get("numerical_policy") or {}).get("subnormals")
    finished = rec.get("status") in ("passed", "failed")
    at = fwd.get("max_ulps_input")
    value = None
    if at is not None:
        import numpy as np
        value = repr(float(np.uint32(int(at, 16)).view(np.float32)))
    value_contract = ((rec.get("capsule") or {}).get("contracts") or {}).get("value") or {}
    out = {"capsule": (rec.get("capsule") or {}).get("name"), "record": record_name,
           "symbol": value_contract.get("native_symbol") or "",
           "status": rec.get("status"), "message": rec.get("message") or "",
           "mode": rec.get("mode"), "stride": rec.get("stride"),
           "inputs": fwd.get("elements", 0),
           "patterns": (rec.get("patterns") or {}).get("checked", 0),
           "max_ulps": fwd.get("max_ulps") if finished else None,
           "max_ulps_input": at, "max_ulps_input_value": value,
           "not_correctly_rounded": fwd.get("not_correctly_rounded", 0),
           "flushed_subnormal_results": fwd.get("subnormals_flushed", 0),
           "flushed_subnormal_inputs": fwd.get("inputs_flushed", 0),
           "subnormal_inputs_failed": fwd.get("subnormal_inputs_failed", 0),
           "nan_mismatch": fwd.get("nan_mismatch", 0), "inf_mismatch": fwd.get("inf_mismatch", 0),
           "signed_zero_mismatch": fwd.get("signed_zero_mismatch", 0),
           "failed": fwd.get("failed", 0), "reasons": dict(fwd.get("reasons") or {}),
           "subnormal_policy": policy, "documented_ulps": documented, "documented": source,
           "within_documented": None, "model": (ref.get("model") or {}).get("label"),
           "to_mpmath": ref.get("to_mpmath", 0), "seconds": rec.get("seconds", 0.0),
           "environment": {k: (rec.get("environment") or {}).get(k)
                           for k in ("gpu", "driver", "cuda_runtime")}}
    if finished and documented is not None and out["inputs"] >= out["patterns"]:
        out["within_documented"] = bool(out["max_ulps"] <= documented + 0.5)
    return out


def na(reason: str) -> dict:
    return {"na": reason}


def place(records: list[tuple[dict, str]], column) -> tuple[dict, dict]:
    """(main cells, variant cells) of a column, by function name, from (record, file name)
    pairs; records of capsules outside the column's functions are left out."""
    main, variants = {}, {}
    for rec, name in records:
        cap = rec.get("capsule") or {}
        function = function_of(str(cap.get("op")))
        if function is None or not str(cap.get("name", "")).startswith(column.prefix + "."):
            continue
        variant = _variant(cap["name"], column.prefix, function)
        if variant is None:
            main[function.name] = cell(rec, name)
        else:
            variants.setdefault(function.name, {})[variant] = cell(rec, name)
    return main, variants


def coverage(stride: int | None) -> str:
    if stride is None:
        return "mixed: each cell says its own (see mode and stride)"
    if stride == 1:
        return "all 2^32 inputs (exhaustive: every non-NaN bit pattern and one NaN per class)"
    return f"sample, every {stride}-th bit pattern (never exhaustive)"


def build(device: str, stride: int | None, functions, columns, cells: dict, variants: dict,
          environment: dict, libraries: dict, seconds: float, column_seconds: dict,
          source: str) -> dict:
    """The table document. `cells[function][column]` and `variants[function][column]` hold
    cell() or na() dicts; stride None when the cells' strides differ."""
    from conformance.formats import ULP_TABLE_FORMAT
    rows = []
    for f in functions:
        row = {"function": f.name, "formula": f.formula, "op": f.label,
               "cells": {c.name: cells.get(f.name, {}).get(c.name, na("not swept"))
                         for c in columns},
               NVIDIA: f.nvidia()}
        extra = variants.get(f.name) or {}
        if extra:
            row["variants"] = extra
        rows.append(row)
    return {"format": ULP_TABLE_FORMAT, "version": TABLE_VERSION, "device": device,
            "mode": "exhaustive" if stride == 1 else "sampled" if stride else "mixed",
            "stride": stride, "coverage": coverage(stride), "source": source,
            "environment": environment, "libraries": libraries,
            "columns": [{"name": c.name, "title": c.title, "prefix": c.prefix,
                         "plugin": c.plugin, "seconds": column_seconds.get(c.name)}
                        for c in columns],
            "measure": "forward; max ulps from the correctly rounded float32 value over the "
                       "inputs judged (NaN results compared as NaN, not in ulps); within a "
                       "documented figure b when at most b + 1/2 (NVIDIA measures from the "
                       "exact value)",
            "rows": rows, "seconds": round(seconds, 3),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}


# --- text --------------------------------------------------------------------------------------

def cell_text(c: dict) -> str:
    """A cell in a few characters: the maximum, and marks: ! beyond its documented figure,
    * NaN or infinity mismatches, f flushed subnormals; n/a, the status of a sweep that did not
    finish, or the finding that stopped one early."""
    if "na" in c:
        return "n/a"
    if c.get("status") not in ("passed", "failed"):
        return str(c.get("status") or "?")
    if c.get("inputs", 0) < c.get("patterns", 0):
        # the sweep stopped at a kernel finding (it raised, returned the wrong type, ...): its
        # maximum covers the inputs before that, so the finding is what the cell says
        return next(iter(c.get("reasons") or {}), "stopped")
    marks = ("!" if c.get("within_documented") is False else "") + \
        ("*" if c.get("nan_mismatch") or c.get("inf_mismatch") else "") + \
        ("f" if c.get("flushed_subnormal_results") or c.get("flushed_subnormal_inputs") else "")
    return f"{c['max_ulps']:.3g}{(' ' + marks) if marks else ''}"


def _nvidia_text(n: dict) -> str:
    return "n/a" if "na" in n else f"{n['documented_ulps']:g} ({n['function']})"


def text(table: dict) -> str:
    """The table as fixed-width text, with its legend, the n/a reasons and one detail line per
    swept cell."""
    env = table.get("environment") or {}
    from conformance.evidence import cuda_versions
    where = (f"{env.get('gpu')}, {cuda_versions(env)}" if table.get("device") == "cuda"
             else "the CPU (NumPy)")
    titles = [c["title"] for c in table["columns"]] + ["NVIDIA"]
    lines = [f"ulp table on {where}: {table['coverage']}",
             "max ulps from the correctly rounded float32 value, forward; NVIDIA: the documented "
             "max ulp of CUDA's float32 function",
             "function".ljust(FIRST) + "".join(t[:WIDTH - 1].ljust(WIDTH) for t in titles).rstrip()]
    reasons: dict[str, dict[str, list[str]]] = {}     # reason -> column title -> functions
    details = []
    for row in table["rows"]:
        texts = []
        for col in table["columns"]:
            c = row["cells"][col["name"]]
            texts.append(cell_text(c))
            if "na" in c:
                reasons.setdefault(c["na"], {}).setdefault(col["title"], []).append(
                    row["function"])
            else:
                details.append(detail(c))
        texts.append(_nvidia_text(row[NVIDIA]))
        if "na" in row[NVIDIA]:
            reasons.setdefault("no CUDA function", {}).setdefault("NVIDIA", []).append(
                row["function"])
        lines.append((row["function"].ljust(FIRST) + "".join(t.ljust(WIDTH) for t in texts))
                     .rstrip())
        for k, col in enumerate(table["columns"]):
            for variant, c in ((row.get("variants") or {}).get(col["name"]) or {}).items():
                # the variant's figure under its own column, the others blank
                cells = "".join((cell_text(c) if j == k else "").ljust(WIDTH) for j in range(k + 1))
                lines.append((f"  .{variant}"[:FIRST - 1].ljust(FIRST) + cells).rstrip())
                details.append(detail(c))
    lines.append("marks: ! beyond the documented figure (+1/2: NVIDIA measures from the exact "
                 "value); * NaN or inf mismatches; f subnormals flushed")
    everything = len(table["rows"])
    for why, where_ in reasons.items():
        said = "; ".join(f"{title} ({'all' if len(fns) == everything else ', '.join(fns)})"
                         for title, fns in where_.items())
        lines.append(f"n/a, {why}: {said}")
    lines += details
    lines.append(f"{table['seconds']:.1f} s in all")
    return "\n".join(lines)


def detail(c: dict) -> str:
    at = c.get("max_ulps_input")
    where = f" at {at} ({c.get('max_ulps_input_value')})" if at else ""
    doc = ("none documented" if c.get("documented_ulps") is None
           else f"documented {c['documented_ulps']:g}")
    reasons = ", ".join(f"{k} {v}" for k, v in sorted((c.get("reasons") or {}).items()))
    failed = f"{c['failed']} ({reasons})" if reasons else f"{c['failed']}"
    return (f"  {c['capsule']}: {c['status']}, max {_num(c.get('max_ulps'))} ulp{where} "
            f"({doc}); not correctly rounded {c['not_correctly_rounded']}; flushed results "
            f"{c['flushed_subnormal_results']}, inputs {c['flushed_subnormal_inputs']}; NaN "
            f"{c['nan_mismatch']}, inf {c['inf_mismatch']}, signed zero "
            f"{c['signed_zero_mismatch']}; failed {failed}; {c['seconds']:.2f} s")


def _num(v) -> str:
    return "-" if v is None else f"{v:.3g}"

