"""Issue 38, the console's half: what `torchlean-conformance` prints tells the truth at a glance.
One line per distinct failure reason, the most telling first, each with a replay command that
replays its own case; reasons in one fixed order; "shrunk" only for a case that got smaller; a
legend for err/bound; one determinism count; a raising kernel's own frames; suites that follow
--capsule with progress lines off a terminal; export-trust --plugin listing the plugin's capsules
alone; no doubled words; a --help that explains every option it lists."""
from __future__ import annotations

import ast
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conformance import cli, console
from conformance.failures import Failure
from conformance.generators import Case
from engine.types import BackendOp as Op

REPO = Path(__file__).resolve().parent.parent
NUMPY_KERNELS = "fixtures.plugins.numpy_kernels:ENTRIES"
MISBEHAVING = "fixtures.plugins.numpy_unary_misbehaving:ENTRIES"


def run_cli(*args):
    """The command as a user types it, from the repository (frames are shown relative to it)."""
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=REPO)


# --- 3 and 4: one line per failure reason, the most telling first, in one order -----------------

def _failure(reason, expected, got, error, bound, element=(0,), output="value", ulps=1.0):
    return {"output": output, "element": list(element), "reason": reason,
            "expected": "0x3f800000", "expected_value": expected, "got": "0x3f800001",
            "got_value": got, "exact": expected, "error": error, "bound": bound, "ulps": ulps,
            "inputs": {"in0": ["0x3f800000"]}}


def _ce(summary, elements, reasons, failure, note, replay):
    case = {"class": "normal", "index": 0, "seed": 0, "summary": summary, "elements": elements,
            "note": note}
    return {"case": case, "reasons": reasons, "failures": [failure], "shrunk": case,
            "shrunk_failures": [failure], "replay_command": replay}


NOT_SHRUNK = "not shrunk: no smaller case still failed for the same reason within 30 evaluations"
RECORD = {
    "capsule": {"name": "user.my_softmax", "op": "softmax"}, "status": "failed",
    "cases": {"total": 40}, "stats": {"forward": {"worst_ratio": 0.9, "worst_ratio_failing": 3.0}},
    # in the order a run met them: the first failing case was the least telling one
    "failure_reasons": {"exceeds-bound": 9, "vjp-exceeds-bound": 2, "nan-mismatch": 1},
    "counterexamples": [
        _ce("softmax(f32[255, 2]; {'axis': -1})", 510, ["exceeds-bound"],
            _failure("exceeds-bound", 0.25, 0.25000003, 5e-8, 4e-8), NOT_SHRUNK, "replay A"),
        _ce("softmax(f32[1, 4]; {'axis': -1})", 4, ["vjp-exceeds-bound"],
            _failure("vjp-exceeds-bound", 0.5, 0.5000001, 7e-8, 1e-8, (0, 1), "grad[0]"),
            "shrunk from shapes[1] in 9 evaluations", "replay B"),
        _ce("softmax(f32[3, 4]; {'axis': -1})", 12, ["exceeds-bound"],
            _failure("exceeds-bound", 0.25, 0.25000006, 1.2e-7, 4e-8, (2, 3)),
            "shrunk from normal[4] in 12 evaluations", "replay C"),
        _ce("softmax(f32[1]; {'axis': -1})", 1, ["nan-mismatch"],
            _failure("nan-mismatch", 1.0, "nan", "nan", 6e-8),
            "shrunk from special[0] in 5 evaluations", "replay D"),
    ]}


def test_each_failure_reason_gets_its_own_line_the_most_telling_first(capsys):
    console.print_summary([RECORD], Path("/tmp/ev"))
    out = capsys.readouterr().out.splitlines()
    start = out.index("  user.my_softmax: failed: nan-mismatch x1, exceeds-bound x9, "
                      "vjp-exceeds-bound x2")
    assert out[start + 1:] == [
        # a wrong special value first, then the bound excesses by err/bound (7 before 3), each
        # shown by its most telling counterexample (err/bound 3, not the first case's 1.25)
        "    nan-mismatch x1: softmax(f32[1]; {'axis': -1}): value[0]: expected 1, got nan",
        "      shrunk from special[0] in 5 evaluations",
        "      replay: replay D",
        "    vjp-exceeds-bound x2: softmax(f32[1, 4]; {'axis': -1}): grad[0][0, 1]: expected "
        "0.5, got 0.5000001, err/bound 7",
        "      shrunk from shapes[1] in 9 evaluations",
        "      replay: replay B",
        "    exceeds-bound x9: softmax(f32[3, 4]; {'axis': -1}): value[2, 3]: expected 0.25, "
        "got 0.25000006, err/bound 3",
        "      shrunk from normal[4] in 12 evaluations",
        "      replay: replay C"]


def test_on_ties_of_err_bound_the_smaller_case_shows_the_reason():
    same = _failure("exceeds-bound", 0.25, 0.25000003, 8e-8, 4e-8)
    rec = {"failure_reasons": {"exceeds-bound": 2}, "counterexamples": [
        _ce("softmax(f32[9]; {})", 9, ["exceeds-bound"], same, "", "replay big"),
        _ce("softmax(f32[2]; {})", 2, ["exceeds-bound"], same, "", "replay small")]}
    [line] = console.reason_lines(rec)
    assert line.counterexample["replay_command"] == "replay small" and line.ratio == 2.0


@pytest.mark.parametrize("order", [
    ["exceeds-bound", "inf-mismatch", "raised", "vjp-nan-mismatch", "nan-mismatch"],
    ["nan-mismatch", "vjp-nan-mismatch", "raised", "inf-mismatch", "exceeds-bound"],
    ["inf-mismatch", "exceeds-bound", "nan-mismatch", "raised", "vjp-nan-mismatch"]])
def test_failure_reasons_print_in_one_fixed_order(order, capsys):
    counts = {"exceeds-bound": 9, "inf-mismatch": 1, "raised": 2, "nan-mismatch": 4,
              "vjp-nan-mismatch": 3}
    rec = {"capsule": {"name": "user.k"}, "status": "failed",
           "failure_reasons": {name: counts[name] for name in order}}
    console.print_summary([rec], Path("/tmp/ev"))
    assert "  user.k: failed: raised x2, nan-mismatch x4, vjp-nan-mismatch x3, inf-mismatch x1, "\
           "exceeds-bound x9" in capsys.readouterr().out.splitlines()


def test_a_plugin_run_prints_each_reason_with_a_replay_of_its_own_case(tmp_path):
    out = run_cli("run", "--quick", "--seed", "1", "--plugin", NUMPY_KERNELS, "--capsule",
                  "user.naive_softplus", "--evidence-dir", str(tmp_path))
    assert out.returncode == 1, out.stderr
    rec = json.loads((tmp_path / "user.naive_softplus.json").read_text())
    counts = rec["failure_reasons"]
    # softplus overflows to inf, flushes subnormals and loses accuracy: the wrong special value
    # first, the flush next (REASON_ORDER), the bound excess last; the counts are the record's
    named = [f"{name} x{counts[name]}" for name in
             ("inf-mismatch", "flushed-subnormal", "exceeds-bound")]
    lines = out.stdout.splitlines()
    start = lines.index(f"  user.naive_softplus: failed: {', '.join(named)}")
    heads = [line.split(":")[0].strip() for line in lines[start + 1:] if line.startswith("    ")
             and not line.startswith("      ")]
    assert heads == named
    files = [shlex.split(line.split("replay: ")[1])[-1] for line in lines[start:]
             if "replay: " in line]
    assert len(set(files)) == 3
    # a case and its sibling share a class and index: each wrote its own replay file, and each
    # printed command replays the case its line shows
    shown = {ce["replay_file"]: ce["shrunk"]["summary"] for ce in rec["counterexamples"]}
    assert len(shown) == len(rec["counterexamples"]) > 3
    for f in files:
        case = json.loads(Path(f).read_text())["case"]
        shape = [a["shape"] for a in case["inputs"]][0]
        assert shown[f] == f"softplus(f32{shape}; {{}})"


# --- 5: "shrunk" only for a case that got smaller -------------------------------------------------

def _element_failure(reason="exceeds-bound"):
    return [Failure("value", [0, 0], reason, "", 0.0, "", 0.0, 0.0, 0.0, 0.0, 0.0, {})]


def _softmax_255x2() -> Case:
    rng = np.random.default_rng(0)
    return Case(Op.softmax, "normal", (rng.standard_normal((255, 2)).astype(np.float32),),
                {"axis": -1}, seed=0, index=3)


def test_a_case_no_candidate_improves_on_is_not_called_shrunk():
    from conformance.shrink import shrink
    case, calls = _softmax_255x2(), []
    original = case.inputs[0].copy()

    def still_fails(c):
        calls.append(c)
        return _element_failure() if np.array_equal(c.inputs[0], original) else None
    small = shrink(case, still_fails, budget=30)
    assert small is case and len(calls) == 30
    assert small.note == "not shrunk: no smaller case still failed for the same reason within " \
                         "30 evaluations; the budget ran out"


def test_values_simplified_at_the_same_size_are_not_shrunk_either():
    from conformance.shrink import shrink
    case = _softmax_255x2()

    def still_fails(c):
        return _element_failure() if c.inputs[0].shape == (255, 2) else None
    small = shrink(case, still_fails, budget=12)
    assert small.inputs[0].shape == (255, 2)
    assert small.note == "not shrunk: no smaller case still failed for the same reason within " \
                         "12 evaluations; the budget ran out; 10 value(s) simplified to 0 or 1"


def test_a_smaller_failing_case_is_shrunk_and_a_vanished_one_says_so():
    from conformance.shrink import shrink
    small = shrink(_softmax_255x2(), lambda c: _element_failure(), budget=30)
    assert small.inputs[0].size < 510 and small.note == "shrunk from normal[3] in 5 evaluations"
    gone = shrink(_softmax_255x2(), lambda c: None, budget=30)
    assert gone.note == "not shrunk: the case did not fail again when judged a second time"


# --- 2 (the console's half): a special-value mismatch is named in the table, not a ratio ---------

def test_the_table_names_nan_and_inf_mismatches_instead_of_a_ratio(capsys):
    """naive_softplus's real record: inf-mismatch x34 with a forward worst ratio of 4.46e+43 from
    its bounded elements; a VJP with NaN and inf mismatches; a clean side keeps its ratio."""
    console.print_summary([
        {"capsule": {"name": "user.naive_softplus"}, "status": "failed", "cases": {"total": 60},
         "failure_reasons": {"inf-mismatch": 34, "exceeds-bound": 11},
         "stats": {"forward": {"worst_ratio": 4.46e43}, "vjp": {"worst_ratio": 0.25}}},
        {"capsule": {"name": "user.softmax_no_shift"}, "status": "failed", "cases": {"total": 9},
         "failure_reasons": {"vjp-nan-mismatch": 6, "vjp-inf-mismatch": 1, "nan-mismatch": 8},
         "stats": {"forward": {"worst_ratio": 10.0}, "vjp": {"worst_ratio": 0.333}}}],
        Path("/tmp/ev"))
    rows = capsys.readouterr().out.splitlines()[2:4]
    assert re.split(r"\s{2,}", rows[0]) == ["user.naive_softplus", "60", "inf mismatch", "0.25",
                                            "failed"]
    assert re.split(r"\s{2,}", rows[1]) == ["user.softmax_no_shift", "9", "NaN mismatch",
                                            "NaN+inf mismatch", "failed"]


# --- 6: what err/bound means, under the table ----------------------------------------------------

def test_the_table_has_a_legend_for_err_bound(capsys):
    console.print_summary([{"capsule": {"name": "user.my_add"}, "status": "passed",
                            "stats": {"forward": {"worst_ratio": 1.0}}}], Path("/tmp/ev"))
    out = capsys.readouterr().out.splitlines()
    assert out[2].split() == ["user.my_add", "0", "1", "-", "passed"]
    assert out[3:7] == [
        "err/bound: the worst error over its bound, failing elements included; at most 1 "
        "passes.",
        "  correctly rounded and bitwise ops: |result - exact| in half ulps, so a correctly "
        "rounded result shows up to 1 (1 at a rounding tie, 0 only where it is exact);",
        "  bounded ops (ulps, faithful, gamma, derived bounds): |result - exact| / bound, and 0 "
        "where the result is the correctly rounded one;",
        "  NaN mismatch, inf mismatch: a special value was wrong somewhere, which no ratio "
        "measures."]
    # and it says what the comparison computes: a correctly rounded add at a rounding tie shows
    # 1, an exact one 0; an exp equal to the correctly rounded result shows 0 though exp(1) is
    # inexact
    from conformance.campaign import check_case
    from engine.registry import registry
    ratios = {}
    for name, inputs in (("reference.add", (np.float32([1, 1]), np.float32([2 ** -24, 1]))),
                         ("reference.exp", (np.float32([0, 1]),))):
        capsule, handler = registry().get(name)
        res = check_case(capsule, handler, Case(capsule.op, "normal", inputs, {}), {})
        assert not res.failures
        ratios[name] = (res.fwd_model.kind, res.fwd.ratio.tolist())
    assert ratios == {"reference.add": ("correctly-rounded", [1.0, 0.0]),
                      "reference.exp": ("ulps", [0.0, 0.0])}


# --- 9: one determinism count ---------------------------------------------------------------------

def test_the_determinism_count_is_of_the_runs_compared_with_the_first(tmp_path, monkeypatch,
                                                                       capsys):
    from conformance import determinism, suites
    differs = determinism.ModeResult(runs=4, differing_runs=1, max_spread=2.0 ** -20,
                                     bitwise_identical=False)
    same = determinism.ModeResult(runs=4, differing_runs=0, max_spread=0.0,
                                  bitwise_identical=True)
    report = determinism.DeterminismReport("cpu", [determinism.CapsuleDeterminism(
        "reference.reduce_sum", "reduce_sum", differs, same, True, 0.25, True)])
    monkeypatch.setattr(suites, "suite_report", lambda *a, **k: report)
    assert cli.main(["run", "--suite", "determinism", "--quick", "--evidence-dir",
                     str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "default: 1 of 3 runs differ from the first (spread 9.54e-07)" in out
    rec = json.loads((tmp_path / "suite-determinism.json").read_text())
    [c] = rec["capsules"]
    # the record holds the same count in the same words: 1 of compared_runs 3 (4 runs in all)
    assert c["default"] == {"runs": 4, "differing_runs": 1, "max_spread": 2.0 ** -20,
                            "bitwise_identical": False, "compared_runs": 3}
    assert c["deterministic"]["compared_runs"] == 3


# --- 10: a raising kernel's own frames ------------------------------------------------------------

def _divides_by_zero(a):
    return a / 0 if a.size else 1 // 0     # the kernel's own line: what the frames must show


def _plugin_kernel(a):
    return _divides_by_zero(a[:0])


def test_a_raising_kernel_keeps_its_own_frames_not_the_harness():
    from conformance.isolation.kernel_side import KernelRaised, run_forward
    from engine.types import Device
    with pytest.raises(KernelRaised) as raised:
        run_forward(_plugin_kernel, Device.cpu, (np.ones(3, np.float32),), {}, False)
    exc = raised.value
    assert str(exc) == "ZeroDivisionError: integer division or modulo by zero"
    here = "tests/test_console_truth.py"
    inner, outer = (f.__code__.co_firstlineno + 1 for f in (_divides_by_zero, _plugin_kernel))
    assert exc.frames == [
        f"{here}:{outer} in _plugin_kernel: return _divides_by_zero(a[:0])",
        f"{here}:{inner} in _divides_by_zero: return a / 0 if a.size else 1 // 0     # the "
        "kernel's own line: what the frames must show"]


def test_frames_from_a_kernel_process_are_bounded_text():
    from conformance.isolation.kernel_side import FRAME_CHARS, FRAMES_KEPT, bounded_frames
    assert bounded_frames("not a list") == [] and bounded_frames(None) == []
    sent = ["\x1b[2Jclear.py:1 in f", 7, "x" * 10_000] + [f"f{i}.py:1" for i in range(50)]
    kept = bounded_frames(sent)
    assert kept[0] == "\\x1b[2Jclear.py:1 in f"           # a terminal escape, shown inert
    assert kept[1] == "x" * FRAME_CHARS and len(kept) == FRAMES_KEPT + 1


def test_a_raising_plugin_kernel_is_recorded_and_replayed_with_its_frames(tmp_path):
    out = run_cli("run", "--quick", "--seed", "1", "--plugin", MISBEHAVING, "--capsule",
                  "user.raising_abs", "--evidence-dir", str(tmp_path))
    assert out.returncode == 1, out.stderr
    frame = 'fixtures/plugins/numpy_unary_misbehaving.py:15 in raising_abs: raise ' \
            'RuntimeError("planted failure")'
    assert f"    raised x60: abs(f32[0]; {{}}): value: RuntimeError: planted failure (at " \
           f"{frame})" in out.stdout.splitlines()
    rec = json.loads((tmp_path / "user.raising_abs.json").read_text())
    assert rec["counterexamples"][0]["failures"][0]["kernel_frames"] == [frame]
    replay = next(line.split("replay: ")[1] for line in out.stdout.splitlines()
                  if "replay: " in line)
    again = run_cli(*shlex.split(replay)[1:])
    assert again.returncode == 1
    assert again.stdout.splitlines()[1:] == [
        "  value: raised: RuntimeError: planted failure",
        "    raised at (the kernel's frames, innermost last):",
        f"      {frame}",
        "still failing"]


def test_other_failures_keep_their_record_fields():
    f = Failure("value", [0], "exceeds-bound", "", 0.0, "", 0.0, 0.0, 0.0, 0.0, 0.0, {})
    assert "kernel_frames" not in f.to_json()


# --- 11: the suites follow --capsule, with progress lines off a terminal --------------------------

def test_the_suites_audit_only_the_selected_capsules_and_say_so(tmp_path, capsys):
    code = cli.main(["run", "--capsule", "reference.softmax", "reference.reduce_sum", "--quick",
                     "--evidence-dir", str(tmp_path)])
    assert code == 0
    out, err = capsys.readouterr()
    guards = json.loads((tmp_path / "suite-guards.json").read_text())
    assert guards["selection"] == ["reference.softmax", "reference.reduce_sum"]
    from conformance.guards import _cross_cutting_cases, guard_cases
    cross = [c.name for c in _cross_cutting_cases()]
    per_op = [o["name"] for o in guards["outcomes"]][:-len(cross)]
    assert per_op and all(n.split(":")[0] in ("softmax", "reduce_sum") for n in per_op)
    assert len(guards["outcomes"]) < len(guard_cases())
    determinism = json.loads((tmp_path / "suite-determinism.json").read_text())
    assert [c["capsule"] for c in determinism["capsules"]] == ["reference.reduce_sum"]
    assert not (tmp_path / "suite-allocator-cap.json").exists()
    assert "allocator-cap: skipped: it checks no capsule, so a --capsule run leaves it out (run " \
           "it alone with --suite allocator-cap)" in out.splitlines()
    # the suites that ran, each with its wall time, last (check.sh's stage is their sum)
    (timing,) = [line for line in out.splitlines() if line.startswith("suites' wall time: ")]
    assert re.fullmatch(r"suites' wall time: campaign \d+\.\d s, guards \d+\.\d s, "
                        r"determinism \d+\.\d s", timing), timing
    assert out.splitlines()[-1] == timing
    # stderr is no terminal here: a plain line per finished capsule and suite (the campaign's
    # two capsules end in whichever order their workers finish)
    progress = [line for line in err.splitlines() if line.startswith("[")]
    assert sorted(line.split("] ")[1] for line in progress[:2]) == [
        "reference.reduce_sum: passed", "reference.softmax: passed"]
    assert progress[2:] == ["[suite 1/4] campaign: passed", "[suite 2/4] guards: passed",
                            "[1/1] determinism reference.reduce_sum: passed",
                            "[suite 3/4] determinism: passed"]


def test_a_guard_record_of_a_selection_earns_no_capsule_checked(tmp_path):
    from conformance.fingerprint import checkout_digest
    from conformance.trust import guards_status
    rec = {"suite": "guards", "passed": True, "tried": 18, "rejected": 18,
           "selection": ["reference.softmax"], "checkout": checkout_digest()}
    (tmp_path / "suite-guards.json").write_text(json.dumps(rec))
    assert guards_status(tmp_path) == {
        "status": "partial", "note": "suite-guards.json checked only the ops of --capsule "
                                     "reference.softmax: rerun `torchlean-conformance run "
                                     "--suite guards`"}


# --- 12 and 13: export-trust --plugin lists the plugin's capsules; no doubled words ---------------

def test_export_trust_with_a_plugin_lists_its_capsules_first_and_alone(tmp_path, capsys):
    from engine.registry import registry
    registered = sum(c.device.label == "cpu" for c in registry().capsules())
    assert cli.main(["export-trust", "--plugin", NUMPY_KERNELS, "--evidence-dir",
                     str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "user.numpy_add: declared fuzzed, earned nothing (no evidence record)",
        "user.naive_softplus: declared fuzzed, earned nothing (no evidence record)",
        f"{registered} registry capsules of cpu not listed (0 of them earned something); rerun "
        "without --plugin to see them",
        f"wrote {tmp_path / 'trust.json'}"]
    doc = json.loads((tmp_path / "trust.json").read_text())
    assert len(doc["capsules"]) == registered + 2       # the export itself holds them all


def test_a_cut_json_file_is_named_without_a_doubled_word(tmp_path):
    from conformance.jsonfile import UnusableFileError, read_object
    path = tmp_path / "suite-guards.json"
    path.write_text('{"suite": "gua')
    with pytest.raises(UnusableFileError) as exc:
        read_object(path, "rerun it")
    assert "is not valid JSON (Unterminated string starting at: line 1, column 11; " \
           "truncated?)" in str(exc.value)


DOUBLED = re.compile(r"\b(the|a|an|at|to|of|in|on|is|and|or|for|by|be|it|as|with|that|from)"
                     r"\s+\1\b", re.IGNORECASE)
FORMULAS = {("conformance/exhaustive/refs.py", "a a")}    # -1 / (a a): a product, not a typo


def test_no_message_of_the_conformance_package_doubles_a_word():
    found = []
    for path in sorted((REPO / "conformance").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.JoinedStr):     # f-strings: the literal parts, joined
                text = "".join(v.value if isinstance(v, ast.Constant) else "{}"
                               for v in node.values)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
            else:
                continue
            found += [(rel, m.group(0)) for m in DOUBLED.finditer(text)
                      if (rel, m.group(0)) not in FORMULAS]
    assert found == []


# --- 17: --help lists and explains what it offers; exhaustive defaults to cpu ---------------------

def _help(*args) -> None:
    """`torchlean-conformance ARGS --help`: argparse prints it and exits."""
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([*args, "--help"])


def test_the_top_level_help_lists_every_subcommand(capsys):
    _help()
    text = capsys.readouterr().out
    description = text.split("positional arguments:")[0]
    listed = text.split("positional arguments:")[1].split("options:")[0]
    for name in cli.SUBCOMMANDS:
        assert f"`{name}`" in description and re.search(rf"^    {name}\s", listed, re.M), name


def test_every_option_of_export_trust_has_a_help_text(capsys):
    _help("export-trust")
    options = capsys.readouterr().out.split("options:")[1]
    assert "  --device DEVICE       the device whose capsules and evidence to export" in options
    assert re.search(r"--plugin MODULE:ATTR\s+also export the capsules of a user's module",
                     options)
    parser = cli.build_parser()
    export = parser._subparsers._group_actions[0].choices["export-trust"]
    assert all(a.help for a in export._actions)


def test_exhaustive_defaults_to_cpu_as_run_does():
    parse = cli.build_parser().parse_args
    assert parse(["exhaustive"]).device == parse(["run"]).device == "cpu"


def test_a_sampled_sweep_explains_its_vjp_figure(tmp_path, capsys):
    assert cli.main(["exhaustive", "--capsule", "reference.gelu", "--stride", "1000003",
                     "--evidence-dir", str(tmp_path)]) == 0
    line = capsys.readouterr().out.splitlines()[1]
    rec = json.loads((tmp_path / "exhaustive-reference.gelu.json").read_text())
    assert rec["device"] == "cpu" and rec["vjp"]["max_ulps"] > 1
    assert line == (
        f"  sampled: every K-th bit pattern (K = 1000003), {rec['patterns']['checked']} of 2^32 "
        "checked (a sampled sweep never earns `verified`); vjp max ulp is the distance from the "
        "correctly rounded gradient, not what judges it: its bound is "
        f"{rec['reference']['vjp']['model']['label']}, absolute, so near a zero gradient many "
        "ulps can pass")
