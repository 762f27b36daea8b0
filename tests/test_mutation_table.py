"""scripts/mutation_table.py, the table the notes quote: it prints a row per planted bug with the
reasons per seed and its verdict, a row per correct kernel, and exits 0 only when every bug was
caught for its reason and no correct kernel failed (two of each here, one seed: the full table is
tests/test_mutations.py's job)."""
import importlib.util
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _script():
    spec = importlib.util.spec_from_file_location("mutation_table",
                                                  REPO / "scripts" / "mutation_table.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_table_names_reasons_and_verdicts(monkeypatch, capsys):
    sys.path.insert(0, str(REPO / "tests"))
    import mutation_registry as R
    monkeypatch.setattr(R, "MUTANTS", {k: R.MUTANTS[k] for k in ("relu_negative_zero",
                                                                 "sub_vjp_wrong_sign")})
    monkeypatch.setattr(R, "CORRECT", {"pairwise_sum": R.CORRECT["pairwise_sum"]})
    assert _script().main(["--seeds", "1", "--clean-seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| relu_negative_zero \| signed-zero \| signed-zero x\d+ \| caught \|", out)
    assert re.search(r"\| sub_vjp_wrong_sign \| vjp-not-bitwise \| vjp-not-bitwise x\d+ \| "
                     r"caught \|", out)
    assert "| pairwise_sum | 1 of 1 |" in out
    assert out.rstrip().endswith("2 of 2 planted bugs caught for their reason on every seed; 0 "
                                 "false alarms over 1 correct kernels x 1 seeds")


def test_a_missed_bug_makes_it_fail(monkeypatch, capsys):
    sys.path.insert(0, str(REPO / "tests"))
    import mutation_registry as R
    op, forward, policy, vjp, declared, reason, allowed = R.MUTANTS["relu_negative_zero"]
    # the same kernel, but claimed to be flagged for a reason it never shows
    monkeypatch.setattr(R, "MUTANTS", {"relu_negative_zero": (op, forward, policy, vjp, declared,
                                                              "exceeds-bound", allowed)})
    monkeypatch.setattr(R, "CORRECT", {})
    assert _script().main(["--seeds", "1", "--clean-seeds", "1"]) == 1
    assert "| MISSED |" in capsys.readouterr().out
