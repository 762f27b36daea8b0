"""One column of the ulp table swept in a process of its own:
`python -m conformance.ulp_table.sweep` runs the exhaustive sweep (conformance/exhaustive/: its
selection, driver, judge and records, unchanged) over one implementation's capsules back to
back, so each library is imported and its GPU context made once, and no two libraries share a
process (JAX's allocator beside PyTorch's, a crash taking the others down). Each record is
written as `exhaustive` writes it; a manifest lists what was swept. The parent
(`torchlean-conformance ulp-table`, cli.py) holds the evidence directory's lock for the whole
command, so this process takes none.

Exit status: 0 the column was swept (its capsules' verdicts are in their records); 2 a usage
error, one line on stderr (the plugin refused to load: a missing library, no GPU; no capsule of
the column's name); 130 interrupted."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from conformance.exit_codes import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

MANIFEST = "ulp-table-{column}.manifest.json"


@dataclass
class ColumnSweep:
    """What one column's sweep process left: the records it wrote (capsule name -> file), or
    the one line that says why it swept nothing (`refused`), or why it stopped partway (`died`);
    its wall time."""
    records: dict = field(default_factory=dict)
    refused: str = ""
    died: str = ""
    seconds: float = 0.0
    exit_code: int = 0


def patterns(column, functions) -> list[str]:
    """The capsule globs of a column's functions: <prefix>.<name> and its variants (ours are
    named by the engine's op label: native_cuda.gelu is gelu_tanh's)."""
    out = []
    for f in functions:
        if f.name in column.lacks:
            continue
        key = f.label if column.plugin is None else f.name
        out += [f"{column.prefix}.{key}", f"{column.prefix}.{key}.*"]
    return out


def run_column(column, functions, device: str, stride: int, out_dir: Path,
               say=print) -> ColumnSweep:
    """Sweep a column in its own process; its summary lines are relayed through `say` as they
    come. KeyboardInterrupt ends the child and is raised again."""
    globs = patterns(column, functions)
    if not globs:
        return ColumnSweep()
    # the manifest lives outside the evidence directory, whose readers would take it for a
    # stray evidence file were a run cut short
    scratch = tempfile.TemporaryDirectory(prefix="torchlean-ulp-")
    manifest = Path(scratch.name) / MANIFEST.format(column=column.name)
    cmd = [sys.executable, "-m", "conformance.ulp_table.sweep", "--device", device,
           "--stride", str(stride), "--evidence-dir", str(out_dir), "--manifest", str(manifest),
           "--prefix", column.prefix]
    cmd += [a for g in globs for a in ("--capsule", g)]
    if column.plugin:
        cmd += ["--plugin", column.plugin]
    root = str(Path(__file__).resolve().parent.parent.parent)
    env = dict(os.environ, **column.env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.getcwd(), env.get("PYTHONPATH"))
                                        if p)
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+", errors="replace") as err:
        child = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=err, text=True, errors="replace")
        try:
            for line in child.stdout:
                say(f"  {column.name}: {line.rstrip()}")
            code = child.wait()
        except KeyboardInterrupt:
            child.kill()
            child.wait()
            raise
        err.seek(0)
        tail = err.read()[-20000:]
    out = ColumnSweep(seconds=round(time.perf_counter() - t0, 3), exit_code=code)
    if manifest.is_file():
        listed = json.loads(manifest.read_text())
        out.records = {e["capsule"]: out_dir / e["record"] for e in listed["swept"]}
    scratch.cleanup()
    if code == EXIT_INTERRUPTED:
        raise KeyboardInterrupt
    if code == EXIT_USAGE or (code != EXIT_OK and not out.records):
        out.refused = _last_line(tail) or f"its sweep process exited {code}"
    elif code != EXIT_OK:
        out.died = (f"its column's sweep process ended (exit {code}) before sweeping it: "
                    f"{_last_line(tail)}")
    if tail.strip():
        sys.stderr.write(tail)
    return out


def _last_line(text: str) -> str:
    """The child's own one-line message (`torchlean-conformance: ...`), else its last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    said = [ln for ln in lines if ln.startswith("torchlean-conformance: ")]
    line = (said or lines or [""])[-1]
    return line.removeprefix("torchlean-conformance: ")


# --- the child ---------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m conformance.ulp_table.sweep",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--device", required=True, help="cpu or cuda")
    p.add_argument("--stride", type=int, required=True, help="every K-th bit pattern")
    p.add_argument("--evidence-dir", required=True, help="where the records go")
    p.add_argument("--manifest", required=True, help="the list of records written")
    p.add_argument("--prefix", required=True, help="the column's capsule name prefix")
    p.add_argument("--capsule", action="append", required=True, metavar="GLOB",
                   help="the column's capsules")
    p.add_argument("--plugin", default=None, metavar="MODULE:ATTR",
                   help="the plugin that holds them (default: the registry)")
    return p


def main(argv: list[str] | None = None) -> int:
    from conformance.exhaustive.cli import ExhaustiveError, select, sweep_one
    from conformance.exhaustive.plan import record_file
    from conformance.plugins import PluginError
    from conformance.selection import NoCapsuleMatchError
    args = _parser().parse_args(argv)
    out_dir = Path(args.evidence_dir)
    try:
        targets = select(args.device, args.capsule, [args.plugin] if args.plugin else [])
    except NoCapsuleMatchError as exc:
        where = f"plugin {args.plugin}" if args.plugin else "the registry"
        print(f"torchlean-conformance: {where} has no capsule of this column's functions "
              f"(the ulp table names them {args.prefix}.<function>): {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (ExhaustiveError, PluginError) as exc:
        print(f"torchlean-conformance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    swept = []
    try:
        for cap, handler, plugin in targets:
            code = sweep_one(cap, handler, plugin, args.device, args.stride, out_dir)
            swept.append({"capsule": cap.name, "op": cap.op.label,
                          "record": record_file(out_dir, cap.name).name, "code": code})
            # after every record: a kernel that kills this process leaves the others listed
            Path(args.manifest).write_text(json.dumps({"swept": swept}))
    except KeyboardInterrupt:
        print("torchlean-conformance: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
