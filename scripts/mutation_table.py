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
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    import mutation_registry as R
    import test_mutations as T
    if a.device == "cuda":
        import test_cuda_mutations as C
        mutant = C._mutant

        def correct(name):
            op, forward, policy, vjp = R.CORRECT[name]
            return C.cuda_capsule(op, f"correct.{name}", C.on_gpu(forward), policy,
                                  C.vjp_on_gpu(vjp) if vjp else None)
    else:
        def mutant(name):
            op, forward, policy, vjp, declared, reason, allowed = R.MUTANTS[name]
            return T.capsule(op, f"mutant.{name}", forward, policy, vjp, declared), reason, \
                allowed

        def correct(name):
            op, forward, policy, vjp = R.CORRECT[name]
            return T.capsule(op, f"correct.{name}", forward, policy, vjp)
    missed = 0
    seeds = range(a.seeds)
    print(f"device {a.device}\n")
    print("| planted bug | must be flagged for | " + " | ".join(f"seed {s}" for s in seeds) +
          " | verdict |")
    print("|---|---|" + "---|" * len(seeds) + "---|")
    for name in sorted(R.MUTANTS):
        cells, ok = [], True
        for seed in seeds:
            cap, reason, allowed = mutant(name)
            r = T.campaign(cap, seed=seed)
            try:
                T.assert_caught(r, reason, allowed)
            except AssertionError:
                ok = False
            cells.append(_reasons(r))
        missed += not ok
        want = " or ".join(reason) if isinstance(reason, tuple) else reason
        print(f"| {name} | {want} | " + " | ".join(cells) + f" | {'caught' if ok else 'MISSED'} |")
    print("\n| correct kernel | seeds passed | worst fwd err/bound |\n|---|---|---|")
    false_alarms = 0
    for name in sorted(R.CORRECT):
        passed, worst = 0, 0.0
        for seed in range(a.clean_seeds):
            r = T.campaign(correct(name), seed=seed, only=None if seed == 0 else T.SEEDED)
            passed += r["status"] == "passed"
            worst = max(worst, r["stats"]["forward"]["worst_ratio"])
        false_alarms += a.clean_seeds - passed
        print(f"| {name} | {passed} of {a.clean_seeds} | {worst:.3g} |")
    print(f"\n{len(R.MUTANTS) - missed} of {len(R.MUTANTS)} planted bugs caught for their reason "
          f"on every seed; {false_alarms} false alarms over {len(R.CORRECT)} correct kernels x "
          f"{a.clean_seeds} seeds")
    return 0 if missed == 0 and false_alarms == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
