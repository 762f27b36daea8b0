"""`torchlean-conformance ulp-table`: sweep every (function, implementation) pair of the ulp table
available here, each implementation in a process of its own (sweep.py), or read the sweep records
an evidence directory already holds (`--from-records`); write <evidence-dir>/ulp-table.json and
print the table (table.py; docs/EXHAUSTIVE.md).

Exit status: 0 the table is written and every sweep it shows finished (its capsules' verdicts
against their own declarations are in their records: the table measures, it does not judge);
2 a usage error, one line (a bad --stride, --implementation, --function or --plugin, --device
cuda without a GPU, no such --from-records directory); 3 a sweep ended in a harness error or
incomplete, or its process died; 130 interrupted. A missing library is an n/a cell, not an error."""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
import time
from pathlib import Path

from conformance.exhaustive.cli import ExhaustiveError, check_device, parse_stride
from conformance.exit_codes import EXIT_HARNESS, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from conformance.ulp_table import BY_NAME, FUNCTIONS, Column, default_columns

TABLE_FILE = "ulp-table.json"
LIBRARIES = ("torch", "jax", "jaxlib", "cupy-cuda13x", "cupy-cuda12x", "cupy", "numpy", "mpmath")


class UlpTableError(Exception):
    """A user error of `ulp-table` (printed as one line, exit 2)."""


class UnknownImplementationError(UlpTableError):
    """--implementation names no column."""


class UnknownFunctionError(UlpTableError):
    """--function names no row."""


class BadPluginColumnError(UlpTableError):
    """--plugin that is not NAME=MODULE:ATTR with a column name."""


class NoRecordsError(UlpTableError):
    """--from-records with an evidence directory that does not exist."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cpu",
                   help="cuda (the table: every implementation's GPU kernels over all 2^32 "
                        "inputs) or cpu (our reference capsules and --plugin columns, sampled) "
                        "(default: cpu, as exhaustive's)")
    p.add_argument("--stride", type=str, default=None,
                   help="sweep every K-th bit pattern: a sample, and the table says so "
                        "(default 1 on cuda, 65537 on cpu)")
    p.add_argument("--evidence-dir",
                   help="where the sweep records and ulp-table.json go (default "
                        "reports/evidence/<device>/)")
    p.add_argument("--from-records", action="store_true",
                   help="sweep nothing: build the table from the exhaustive records the "
                        "evidence directory holds")
    p.add_argument("--implementation", action="append", metavar="NAME",
                   help="sweep only this column (ours, torch, cupy, jax or a --plugin "
                        "column's; repeatable); the others' cells say they were not swept")
    p.add_argument("--function", action="append", metavar="NAME",
                   help=f"only this row (repeatable): {', '.join(f.name for f in FUNCTIONS)}")
    p.add_argument("--plugin", action="append", metavar="NAME=MODULE:ATTR",
                   help="the column NAME swept from a plugin's capsules, named NAME.<function> "
                        "(replaces torch, cupy or jax; any other name adds a column)")


def _pick(names: list[str] | None, known: list[str], error, what: str) -> list[str]:
    if not names:
        return list(known)
    bad = [n for n in names if n not in known]
    if bad:
        raise error(f"--{what} {', '.join(bad)}: expected one of {', '.join(known)}")
    return [n for n in known if n in names]


def columns(device: str, plugins: list[str] | None) -> list[Column]:
    """The default columns with --plugin's replacing or joining them."""
    cols = {c.name: c for c in default_columns(device)}
    for spec in plugins or []:
        name, sep, target = spec.partition("=")
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_]{0,31}", name) or name == "ours" or \
                ":" not in target:
            raise BadPluginColumnError(
                f"--plugin {spec}: expected NAME=MODULE:ATTR, NAME a column (lower-case "
                "letters, digits, underscores; not `ours`) whose capsules the plugin names "
                "NAME.<function>, e.g. --plugin torch=fixtures.plugins.my_torch:ENTRIES")
        old = cols.get(name)
        cols[name] = Column(name, old.title if old else name, name, target,
                            env=dict(old.env) if old else {})
    return list(cols.values())


def _missing(column: Column) -> str:
    """Why a column cannot be swept here without starting it: a library not installed."""
    for module in column.needs:
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed here (no `{module}` module to import)"
    return ""


def _libraries() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for dist in LIBRARIES:
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def _records(out_dir: Path) -> list[tuple[dict, str]]:
    """(record, file name) of every sweep record in the directory."""
    from conformance.formats import EXHAUSTIVE_FORMAT
    from conformance.jsonfile import read_documents
    docs, _ = read_documents(out_dir, "exhaustive-*.json", EXHAUSTIVE_FORMAT,
                             lambda d: isinstance(d.get("forward"), dict), "a sweep record",
                             "torchlean-conformance exhaustive")
    return [(d, f"exhaustive-{(d.get('capsule') or {}).get('name')}.json") for d in docs]


def main(args) -> int:
    try:
        device = args.device
        if device not in ("cpu", "cuda"):
            raise UlpTableError(f"--device {device}: expected cuda or cpu")
        stride = parse_stride(args.stride, device) if (args.stride or not args.from_records) \
            else None
        cols = columns(device, args.plugin)
        chosen = _pick(args.implementation, [c.name for c in cols], UnknownImplementationError,
                       "implementation")
        names = _pick(args.function, [f.name for f in FUNCTIONS], UnknownFunctionError,
                      "function")
        from conformance.evidence_dir import EvidenceLock, default_evidence_dir
        out_dir = Path(args.evidence_dir or default_evidence_dir(device))
        if args.from_records and not out_dir.is_dir():
            raise NoRecordsError(f"--from-records: {out_dir} is no directory; sweep first "
                                 f"(`torchlean-conformance ulp-table --device {device}`)")
        if not args.from_records:
            check_device(device)
    except (UlpTableError, ExhaustiveError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    functions = [BY_NAME[n] for n in names]
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        with EvidenceLock(out_dir):
            return _table(device, stride, cols, chosen, functions, out_dir,
                          sweep=not args.from_records)
    except KeyboardInterrupt:
        print("torchlean-conformance: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _table(device, stride, cols, chosen, functions, out_dir: Path, sweep: bool) -> int:
    """Sweep (or find) every cell, write the table, print it; the exit code."""
    from conformance import evidence
    from conformance.ulp_table import sweep as column_sweep, table
    t0 = time.perf_counter()
    why_not: dict = {}           # column -> why none of its cells has a sweep
    runs: dict = {}              # column -> sweep.ColumnSweep
    for col in cols:
        why = col.unavailable or ("not selected (--implementation)" if col.name not in chosen
                                  else "") or (_missing(col) if sweep else "")
        if not why and sweep:
            runs[col.name] = column_sweep.run_column(col, functions, device, stride, out_dir)
            why = runs[col.name].refused
        why_not[col.name] = why
    recs = _records(out_dir)
    placed = []                  # (function, column, variant or None, cell)
    for col in cols:
        if why_not[col.name]:
            continue
        mine = recs
        if sweep:
            files = {p.name for p in runs[col.name].records.values()}
            mine = [(r, n) for r, n in recs if n in files]
        main, extra = table.place(mine, col)
        for f in functions:
            if f.name in main:
                placed.append((f, col, None, main[f.name]))
            for variant, c in (extra.get(f.name) or {}).items():
                placed.append((f, col, variant, c))
    env = _environment(device, sweep, [c for *_, c in placed])
    cells: dict = {}
    variants: dict = {}
    for f, col, variant, c in placed:
        here = {k: env.get(k) for k in c["environment"]}
        if c["environment"].get("gpu") != env.get("gpu") or (device == "cuda" and
                                                             c["environment"] != here):
            c = table.na(f"its record ({c['record']}) is of another machine "
                         f"({c['environment']})")
        elif stride is not None and c["stride"] != stride:
            c = table.na(f"its record ({c['record']}) is of stride {c['stride']}, not {stride}")
        if variant is None:
            cells.setdefault(f.name, {})[col.name] = c
        elif "na" not in c:
            variants.setdefault(f.name, {}).setdefault(col.name, {})[variant] = c
    for col in cols:
        for f in functions:
            if col.name in cells.get(f.name, {}):
                continue
            died = runs[col.name].died if col.name in runs else ""
            why = col.lacks.get(f.name) or why_not[col.name] or died or (
                f"no capsule named {col.prefix}.<function> swept" if sweep else
                f"no record in {out_dir} (run without --from-records to sweep it)")
            cells.setdefault(f.name, {})[col.name] = table.na(why)
    swept = [c for row in cells.values() for c in row.values() if "na" not in c]
    swept += [c for row in variants.values() for col in row.values() for c in col.values()]
    if stride is None:
        strides = {c["stride"] for c in swept}
        stride = strides.pop() if len(strides) == 1 else None
    libraries = _libraries()
    # what a peer's kernel process ran (its capsules' native symbol: `torch 2.11.0`)
    peers = {c.prefix for c in cols if c.plugin}
    libraries.update({c["capsule"].split(".")[0]: c["symbol"] for c in swept
                      if c["symbol"] and c["capsule"].split(".")[0] in peers})
    doc = table.build(device, stride, functions, cols, cells, variants, env, libraries,
                      time.perf_counter() - t0, {k: r.seconds for k, r in runs.items()},
                      "swept" if sweep else "records")
    evidence.write_atomic(out_dir / TABLE_FILE, doc)
    print(table.text(doc))
    print(f"wrote {out_dir / TABLE_FILE}")
    broken = any(c["status"] not in ("passed", "failed") for c in swept)
    # a sweep process that died (not a refusal: exit 2) leaves its column's later cells unswept
    broken |= any(r.exit_code not in (0, 2) for r in runs.values())
    return EXIT_HARNESS if broken else EXIT_OK


def _environment(device: str, sweep: bool, placed: list[dict]) -> dict:
    """The table's GPU, driver and CUDA runtime: this machine's when it sweeps, else the first
    record's (the cells of records made elsewhere are then n/a: a table is of one GPU)."""
    keys = ("gpu", "driver", "cuda_runtime")
    if sweep:
        from conformance import evidence
        env = evidence.environment(device)
        return {k: env.get(k) for k in keys}
    return next((dict(c["environment"]) for c in placed if c["environment"].get("gpu")),
                {k: None for k in keys})
