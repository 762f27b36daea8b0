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


def test_only_and_details_say_what_a_missed_seed_was(monkeypatch, capsys):
    # --only keeps the named rows; --details prints, under a missed row, its seed's reasons and
    # counterexample (case, element, expected and got): what the next reader needs to diagnose it
    sys.path.insert(0, str(REPO / "tests"))
    import mutation_registry as R
    op, forward, policy, vjp, declared, reason, allowed = R.MUTANTS["relu_negative_zero"]
    monkeypatch.setitem(R.MUTANTS, "relu_negative_zero",
                        (op, forward, policy, vjp, declared, "exceeds-bound", allowed))
    assert _script().main(["--seeds", "1", "--only", "relu_negative_zero", "--details"]) == 1
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert [r.split(" | ")[0] for r in rows] == ["| planted bug", "| relu_negative_zero",
                                                 "| correct kernel"]   # no correct kernel rows
    assert "    seed 0: failed, signed-zero x" in out
    assert re.search(r"      value \[.*\]: signed-zero, expected 0x00000000 got 0x80000000", out)


def test_only_refuses_a_name_it_does_not_know(capsys):
    import pytest
    with pytest.raises(SystemExit) as exc:
        _script().main(["--only", "no_such_kernel"])
    assert exc.value.code == 2
    assert "no planted bug or correct kernel named no_such_kernel" in capsys.readouterr().err
