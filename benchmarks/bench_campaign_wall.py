"""The quick CPU campaign's wall time in this checkout against another checkout (issue 34: the
kernel isolation's cost), measured in one run on one machine, the two alternating so that a
drift of the machine's load falls on both:

    python3 benchmarks/bench_campaign_wall.py --baseline /path/to/other/checkout [--repeats 3]

Each run is `python -m conformance.cli run --suite campaign --quick --fresh --no-progress
--jobs J` in that checkout's directory (so it imports its own code) into a fresh evidence
directory. Printed: every run's seconds and the capsules and cases it judged (a later checkout
may run more cases: generator classes added since), then the medians' ratio and the ratio per
case. Python's bytecode cache matters here (without it each judge and each kernel process compiles
what it imports), so both checkouts are compiled first (`compileall`), as an install leaves them."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def one_run(checkout: Path, jobs: int) -> tuple[float, int, int]:
    """(wall seconds, capsules, cases) of one fresh quick CPU campaign in `checkout`."""
    with tempfile.TemporaryDirectory() as ev:
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--suite",
                               "campaign", "--quick", "--fresh", "--no-progress", "--jobs",
                               str(jobs), "--evidence-dir", ev], cwd=checkout,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            sys.exit(f"bench_campaign_wall: the campaign in {checkout} exited "
                     f"{proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        cases = 0
        records = list(Path(ev).glob("*.json"))
        for path in records:
            record = json.loads(path.read_text())
            if isinstance(record.get("cases"), dict):
                cases += int(record["cases"].get("total", 0))
        return seconds, sum(1 for p in records if not p.name.startswith("suite-")), cases


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", required=True, type=Path,
                   help="another checkout of this repository (e.g. a git worktree)")
    p.add_argument("--this", type=Path, default=HERE,
                   help="the checkout measured against the baseline (default: this one)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    a = p.parse_args(argv)
    for flag, path in (("--baseline", a.baseline), ("--this", a.this)):
        if not (path / "conformance" / "cli.py").is_file():
            p.error(f"{flag} {path} is not a checkout of this repository (no conformance/cli.py "
                    "there); pass a git worktree of the commit to compare with")
    if a.repeats < 1:
        p.error(f"--repeats {a.repeats}: expected at least 1")
    sides = {"baseline": a.baseline.resolve(), "this": a.this.resolve()}
    # Both checkouts with every module's bytecode compiled, as an install leaves them: a checkout
    # without it (a fresh worktree under PYTHONDONTWRITEBYTECODE) compiles in every judge and
    # kernel process, which once made a fair comparison look 12% slower than the other side
    for checkout in sides.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", "conformance", "engine",
                        "fixtures"], cwd=checkout, capture_output=True, check=True)
    bytecode = "compiled in both checkouts before the runs"
    runs = {k: [] for k in sides}
    one_run(sides["baseline"], a.jobs)     # warm both (file cache, bytecode where written)
    one_run(sides["this"], a.jobs)
    for i in range(a.repeats):
        for side, checkout in sides.items():
            runs[side].append(one_run(checkout, a.jobs))
            s, caps, cases = runs[side][-1]
            print(f"run {i + 1} {side:8s} {s:7.1f} s  {caps} capsules  {cases} cases", flush=True)
    med = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
    cases = {k: v[0][2] for k, v in runs.items()}
    print(f"\njobs {a.jobs}, bytecode cache {bytecode}, {a.repeats} runs each")
    print(f"baseline {sides['baseline']}: median {med['baseline']:.1f} s, {cases['baseline']} cases")
    print(f"this     {sides['this']}: median {med['this']:.1f} s, {cases['this']} cases")
    print(f"wall ratio this/baseline {med['this'] / med['baseline']:.3f}; per case "
          f"{(med['this'] / cases['this']) / (med['baseline'] / cases['baseline']):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
