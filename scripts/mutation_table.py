"""The mutation suite as a table: each planted bug of tests/mutants.py with the reasons the
campaign flagged it for over seeds 0-2, and each correct kernel with the seeds it passed of 10
and its worst forward error/bound. The tests (tests/test_mutations.py, test_cuda_mutations.py)
assert the same; this prints what they saw, for notes and reviews.

    python scripts/mutation_table.py              # CPU capsules
    python scripts/mutation_table.py --device cuda  # the same bugs as CUDA capsules (a GPU)
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _reasons(result: dict) -> str:
    text = ", ".join(f"{k} x{v}" for k, v in sorted(result["failure_reasons"].items()))
    if result["harness_errors"]:
        text += f" (harness errors: {len(result['harness_errors'])})"
    return text or f"({result['status']}, no reason)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--seeds", type=int, default=3, help="seeds per planted bug (default 3)")
    p.add_argument("--clean-seeds", type=int, default=10,
                   help="seeds per correct kernel (default 10)")
    p.add_argument("--jobs", type=int, default=1,
                   help="rows computed in parallel worker processes (default 1: in this process)")
    p.add_argument("--only", nargs="+", metavar="NAME", default=None,
                   help="these planted bugs and correct kernels alone (names as the table "
                        "prints them)")
    p.add_argument("--details", action="store_true",
                   help="under each row, every seed's failure reasons and first counterexamples "
                        "(case, element, expected, got, bound): what a false alarm or a miss was")
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import mutation_registry as R
    seeds = list(range(a.seeds))
    mutants, corrects = sorted(R.MUTANTS), sorted(R.CORRECT)
    if a.only is not None:
        unknown = sorted(set(a.only) - set(mutants) - set(corrects))
        if unknown:
            p.error(f"--only: no planted bug or correct kernel named {', '.join(unknown)}; the "
                    "names are the table's rows (tests/mutation_registry.py)")
        mutants = [m for m in mutants if m in a.only]
        corrects = [c for c in corrects if c in a.only]
    print(f"device {a.device}\n", flush=True)
    print("| planted bug | must be flagged for | " + " | ".join(f"seed {s}" for s in seeds) +
          " | verdict |")
    print("|---|---|" + "---|" * len(seeds) + "---|", flush=True)
    pool = None
    if a.jobs > 1:   # spawned workers: CuPy's context does not survive a fork
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        pool = ProcessPoolExecutor(a.jobs, mp_context=multiprocessing.get_context("spawn"))
    run = pool.map if pool is not None else map
    # every row is submitted at once; each is printed as soon as it and those above it are done
    details = [a.details]
    m_rows = run(mutant_row, [a.device] * len(mutants), mutants, [seeds] * len(mutants),
                 details * len(mutants))
    c_rows = run(correct_row, [a.device] * len(corrects), corrects,
                 [a.clean_seeds] * len(corrects), details * len(corrects))
    m_rows = [_shown(r) for r in m_rows]
    print("\n| correct kernel | seeds passed | worst fwd err/bound |\n|---|---|---|")
    c_rows = [_shown(r) for r in c_rows]
    if pool is not None:
        pool.shutdown()
    missed = sum(not ok for _, ok, _ in m_rows)
    false_alarms = sum(n for _, n, _ in c_rows)
    print(f"\n{len(mutants) - missed} of {len(mutants)} planted bugs caught for their reason "
          f"on every seed; {false_alarms} false alarms over {len(corrects)} correct kernels x "
          f"{a.clean_seeds} seeds")
    return 0 if missed == 0 and false_alarms == 0 else 1


def _shown(row: tuple) -> tuple:
    print(row[0], flush=True)
    for line in row[2]:
        print(f"    {line}", flush=True)
    return row


def _detail(seed: int, result: dict) -> list[str]:
    """A seed's reasons and its first counterexamples, one line each."""
    lines = [f"seed {seed}: {result['status']}, {_reasons(result)}"]
    for err in result["harness_errors"][:2]:
        lines.append(f"  harness error: {str(err)[:300]}")
    for c in result["counterexamples"][:2]:
        case = c["case"]
        lines.append(f"  {case['class']}[{case['index']}] {case['summary']}"
                     + (f" ({case['note']})" if case.get("note") else ""))
        for f in c["failures"][:3]:
            lines.append(f"    {f['output']} {f['element']}: {f['reason']}, expected "
                         f"{f['expected']} got {f['got']}, error {f['error']} bound {f['bound']}")
    return lines


def _makers(device: str):
    """(mutant(name) -> (capsule and handler, reason, allowed), correct(name) -> capsule and
    handler) for the device."""
    import mutation_registry as R
    import test_mutations as T
    if device == "cuda":
        import test_cuda_mutations as C

        def correct(name):
            op, forward, policy, vjp = R.CORRECT[name]
            return C.cuda_capsule(op, f"correct.{name}", C.on_gpu(forward), policy,
                                  C.vjp_on_gpu(vjp) if vjp else None)
        return C._mutant, correct

    def mutant(name):
        op, forward, policy, vjp, declared, reason, allowed = R.MUTANTS[name]
        return T.capsule(op, f"mutant.{name}", forward, policy, vjp, declared), reason, allowed

    def correct(name):
        op, forward, policy, vjp = R.CORRECT[name]
        return T.capsule(op, f"correct.{name}", forward, policy, vjp)
    return mutant, correct


def mutant_row(device: str, name: str, seeds: list, details: bool = False) -> tuple:
    """One planted bug's table row over the seeds, whether every seed caught it, and (with
    details) the lines of the seeds that missed it."""
    warnings.simplefilter("ignore")
    import test_mutations as T
    mutant, _ = _makers(device)
    cells, ok, lines = [], True, []
    for seed in seeds:
        cap, reason, allowed = mutant(name)
        r = T.campaign(cap, seed=seed)
        try:
            T.assert_caught(r, reason, allowed)
        except AssertionError:
            ok = False
            lines += _detail(seed, r) if details else []
        cells.append(_reasons(r))
    want = " or ".join(reason) if isinstance(reason, tuple) else reason
    return (f"| {name} | {want} | " + " | ".join(cells) + f" | {'caught' if ok else 'MISSED'} |",
            ok, lines)


def correct_row(device: str, name: str, clean_seeds: int, details: bool = False) -> tuple:
    """One correct kernel's row: the seeds it passed, its worst error/bound; its false alarms;
    and (with details) the lines of the seeds it failed."""
    warnings.simplefilter("ignore")
    import test_mutations as T
    _, correct = _makers(device)
    passed, worst, lines = 0, 0.0, []
    for seed in range(clean_seeds):
        r = T.campaign(correct(name), seed=seed, only=None if seed == 0 else T.SEEDED)
        passed += r["status"] == "passed"
        worst = max(worst, r["stats"]["forward"]["worst_ratio"])
        if r["status"] != "passed" and details:
            lines += _detail(seed, r)
    return (f"| {name} | {passed} of {clean_seeds} | {worst:.3g} |", clean_seeds - passed,
            lines)


if __name__ == "__main__":
    raise SystemExit(main())
