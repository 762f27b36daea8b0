"""The compile-flag matrix on the CPU: flag-set parsing and the loader's options per set, distinct
fingerprints, the policies each set makes the capsules declare (and the declared-set override the
matrix uses), the expectation rule, the matrix's assembly, table and exit code from stored
records (tests/flag_records.py), the command's usage errors and its refusal without a GPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import cli, flag_matrix as fm, flags_cli
from conformance.formats import FLAG_MATRIX_FORMAT
from engine.errors import UnknownFlagSetError
from engine.providers.native_cuda import capsules
from engine.runtime import flag_sets, loader
from engine.types import Contraction, Rounding, Subnormals
from flag_records import CAPSULES, scenario, write_record

REPO = Path(__file__).resolve().parent.parent
HISTORICAL = ("-std=c++17", "--fmad=false", "--ftz=false", "--prec-div=true", "--prec-sqrt=true")


# --- flag sets and the loader ---------------------------------------------------------------------

def test_flag_set_parsing():
    assert flag_sets.selected({}) == "default"
    assert flag_sets.selected({flag_sets.FLAG_SET_ENV: " ftz "}) == "ftz"
    assert flag_sets.selected_declared({flag_sets.FLAG_SET_ENV: "ftz"}) == "ftz"
    assert flag_sets.selected_declared({flag_sets.FLAG_SET_ENV: "ftz",
                                        flag_sets.DECLARED_FLAG_SET_ENV: "default"}) == "default"
    with pytest.raises(UnknownFlagSetError) as exc:
        flag_sets.selected({flag_sets.FLAG_SET_ENV: "turbo"})
    msg = str(exc.value)
    assert "TORCHLEAN_NVRTC_FLAG_SET='turbo'" in msg
    assert "default, ftz, fmad, fast-math" in msg and "unset it" in msg


def test_options_per_set():
    # the default set is the historical build, so existing evidence keeps its fingerprints
    assert flag_sets.FLAG_SETS["default"] == HISTORICAL == loader.OPTIONS
    assert "--ftz=true" in flag_sets.FLAG_SETS["ftz"]
    assert "--fmad=true" in flag_sets.FLAG_SETS["fmad"]
    assert flag_sets.FLAG_SETS["fast-math"] == ("-std=c++17", "--use_fast_math")


def test_loader_reads_the_set_once_at_import():
    code = "from engine.runtime import loader; print(' '.join(loader.OPTIONS))"
    env = {**os.environ, flag_sets.FLAG_SET_ENV: "ftz"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True,
                         text=True, check=True).stdout
    assert out.split() == list(flag_sets.FLAG_SETS["ftz"])
    env[flag_sets.FLAG_SET_ENV] = "turbo"
    bad = subprocess.run([sys.executable, "-m", "conformance.cli", "flags"], env=env, cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2
    assert "TORCHLEAN_NVRTC_FLAG_SET='turbo' names no NVRTC flag set" in bad.stderr


def test_distinct_fingerprints_per_set():
    per_file = {s: loader.source_fingerprint("elementwise.cu", o)
                for s, o in flag_sets.FLAG_SETS.items()}
    assert len(set(per_file.values())) == 4
    assert per_file["default"] == loader.source_fingerprint("elementwise.cu")
    builds = {s: fm.flag_set_fingerprint(s) for s in flag_sets.FLAG_SETS}
    assert len(set(builds.values())) == 4


# --- policies per set -----------------------------------------------------------------------------

def _exp_capsule(flag_set: str):
    decl = next(d for d in capsules.ALL_DECLARATIONS if d.capsule_name == "native_cuda.exp")
    return capsules.capsule(decl, flag_sets.FLAG_SETS[flag_set])


def test_policies_per_set():
    default, ftz = _exp_capsule("default"), _exp_capsule("ftz")
    fmad, fast = _exp_capsule("fmad"), _exp_capsule("fast-math")
    assert default.numerical_policy.subnormals is Subnormals.gradual_underflow
    assert ftz.numerical_policy.subnormals is Subnormals.flush_to_zero
    assert fmad.numerical_policy.contraction is Contraction.implementation_defined
    assert fmad.numerical_policy.subnormals is Subnormals.gradual_underflow
    assert fast.numerical_policy.rounding is Rounding.implementation_defined
    # __expf: 2 + floor(|1.173 x|) ulp, at most 106 where the result is normal (|x| <= 88.73)
    assert fast.value_contract.declared_bound.ulps == 2 + int(1.173 * 88.73) == 106
    assert default.value_contract.declared_bound.ulps == 2.0


def test_declared_set_overrides_the_registered_policy(monkeypatch):
    """The matrix's default-policy mode: compiled with ftz, registered with default's policy."""
    class Reg:
        def __init__(self):
            self.caps, self.rules = {}, {}

        def register(self, cap, handler):
            self.caps[cap.name] = cap

        def provide(self, key, fn):   # the device rules: the same under every flag set
            self.rules[key] = fn
    monkeypatch.setattr(loader, "OPTIONS", flag_sets.FLAG_SETS["ftz"])
    honest = Reg()
    capsules.register_all(honest)
    assert honest.caps["native_cuda.exp"].numerical_policy.subnormals is Subnormals.flush_to_zero
    monkeypatch.setattr(loader, "DECLARED_OPTIONS", flag_sets.FLAG_SETS["default"])
    posing = Reg()
    capsules.register_all(posing)
    assert (posing.caps["native_cuda.exp"].numerical_policy.subnormals
            is Subnormals.gradual_underflow)
    assert posing.caps["native_cuda.exp"].notes.startswith(
        "policy declared for -std=c++17 --fmad=false --ftz=false --prec-div=true "
        "--prec-sqrt=true while compiled with -std=c++17 --fmad=false --ftz=true")
    assert honest.caps["native_cuda.exp"].notes.startswith("compiled with -std=c++17 "
                                                           "--fmad=false --ftz=true")
    assert honest.rules == posing.rules == capsules.DEVICE_RULES


# --- the expectation rule -------------------------------------------------------------------------

def test_broken_facts_per_set():
    assert fm.broken_facts("native_cuda.exp", "ftz") == ["subnormal=gradual-underflow"]
    assert fm.broken_facts("native_cuda.exp", "fmad") == ["contract=separate"]
    assert fm.broken_facts("native_cuda.exp", "fast-math") == [
        "round=nearest-even", "subnormal=gradual-underflow", "contract=separate", "bound=2 ulp"]
    assert fm.declared_facts("native_cuda.log", flag_sets.FLAG_SETS["fast-math"])["bound"] == \
        "3 ulp + 3.59e-07 abs"
    # atomics declare subnormal=implementation-defined: a flushing build breaks no promise
    assert fm.broken_facts("native_cuda.reduce_sum", "ftz") == []
    assert fm.facts_differ("native_cuda.reduce_sum", "ftz")      # flush-to-zero is declared
    assert not fm.facts_differ("native_cuda.reshape", "fmad")    # a copy contracts nothing


def test_expectation_rule():
    assert fm.expectation(fm.OWN, ["subnormal=gradual-underflow"], {"subnormal": 5})[0] == \
        fm.MUST_PASS
    assert fm.expectation(fm.DEFAULT_POLICY, [], {"subnormal": 5})[0] == fm.MUST_PASS
    expect, why = fm.expectation(fm.DEFAULT_POLICY, ["subnormal=gradual-underflow"],
                                 {"subnormal": 5})
    assert expect == fm.MUST_FAIL and "5 instance(s) seen" in why
    expect, why = fm.expectation(fm.DEFAULT_POLICY, ["contract=separate"], {"subnormal": 5})
    assert expect == fm.EITHER and "compared bit for bit only against a declared fixed" in why
    assert fm.witnesses({"observed": {"subnormals_flushed": 2, "inputs_flushed": 1}},
                        {"forward": {"flushed_accepted": 4}}) == {"subnormal": 7}
    assert fm.met(fm.MUST_FAIL, "failed") and not fm.met(fm.MUST_FAIL, "passed")
    assert fm.met(fm.MUST_PASS, "crashed") is False and fm.met(fm.EITHER, "passed") is None


# --- the matrix from stored records ---------------------------------------------------------------

def test_matrix_assembly_and_exit_code(tmp_path):
    plan = scenario(tmp_path)
    m = fm.assemble(tmp_path, plan)
    assert m["format"] == FLAG_MATRIX_FORMAT and m["schema_version"] == 1
    rows = {r["capsule"]: r["cells"] for r in m["rows"]}
    assert list(rows) == CAPSULES
    exp_ftz = rows["native_cuda.exp"]["ftz"][fm.DEFAULT_POLICY]
    assert (exp_ftz["status"], exp_ftz["reason"], exp_ftz["expect"], exp_ftz["met"]) == \
        ("failed", "flushed-subnormal x7", "fail", True)
    assert rows["native_cuda.exp"]["fast-math"][fm.DEFAULT_POLICY]["reason"] == \
        "exceeds-bound x40"
    assert rows["native_cuda.reshape"]["ftz"][fm.DEFAULT_POLICY]["expect"] == fm.EITHER
    assert rows["native_cuda.reduce_sum"]["ftz"][fm.DEFAULT_POLICY]["expect"] == fm.MUST_PASS
    assert set(rows["native_cuda.exp"]["default"]) == {fm.OWN}
    assert m["counts"]["cells"] == 20 and m["counts"]["unmet"] == 1
    assert m["counts"]["either"] == 3 and m["counts"]["met"] == 16
    assert m["unmet"] == ["native_cuda.add under fast-math (default-policy): expected to fail "
                          "(breaks subnormal=gradual-underflow (2 instance(s) seen) in the "
                          "own-policy run's cases), got passed"]
    assert fm.exit_code(m) == 1
    text = fm.table(m)
    assert "!! passed" in text and "~ passed" in text and "20 cells: 16 as expected, 1 not" in text
    # the default-policy cell that flushed now fails: every expectation met
    write_record(tmp_path, "fast-math", fm.DEFAULT_POLICY, "native_cuda.add", "failed",
                 {"flushed-subnormal": 2})
    assert fm.exit_code(fm.assemble(tmp_path, plan)) == 0


def test_missing_and_unreadable_records(tmp_path):
    plan = fm.Plan(["default"], ["native_cuda.exp"], {})
    c = fm.assemble(tmp_path, plan)["rows"][0]["cells"]["default"][fm.OWN]
    assert c["status"] == fm.MISSING and c["met"] is False
    path = fm.set_dir(tmp_path, "default", fm.OWN) / "native_cuda.exp.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(fm.FlagMatrixError) as exc:
        fm.assemble(tmp_path, plan)
    assert str(path) in str(exc.value) and "run `torchlean-conformance flags` again" in \
        str(exc.value)


def test_the_gold_fixture_is_what_assembly_writes(tmp_path):
    """fixtures/evidence/flags/flag-matrix.json (the report page's gold input) is this scenario;
    only the build fingerprints, which follow the kernel sources, may move."""
    m = fm.assemble(tmp_path, scenario(tmp_path))
    stored = json.loads((REPO / "fixtures/evidence/flags/flag-matrix.json").read_text())
    for doc in (m, stored):
        for s in doc["sets"]:
            s.pop("fingerprint")
    assert stored == m, ("the matrix's assembly changed: rewrite the fixture with `PYTHONPATH=. "
                         "python tests/flag_records.py`, then the gold page "
                         "(tests/test_flags_report.py)")


# --- the command ----------------------------------------------------------------------------------

def test_usage_errors_and_cpu_refusal(capsys):
    assert cli.main(["flags", "--sets", "ftz,turbo"]) == 2
    assert "--sets 'ftz,turbo': unknown turbo; expected a comma-separated list of default, " \
           "ftz, fmad, fast-math" in capsys.readouterr().err
    assert cli.main(["flags", "--sets", "ftz,ftz"]) == 2
    assert "names a set twice" in capsys.readouterr().err
    assert cli.main(["flags", "--capsule", "reference.*"]) == 2
    assert "matches no native-cuda capsule" in capsys.readouterr().err
    assert cli.main(["flags", "--exhaustive", "--stride", "0"]) == 2
    assert "--stride 0: expected a whole number from 1 to 2^32 - 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:     # run's own check of --cases, before any build
        cli.main(["flags", "--cases", "0"])
    assert exc.value.code == 2
    assert "--cases must be a whole number from 1 to 100000, got '0'" in capsys.readouterr().err
    assert flags_cli.parse_sets("fmad,default") == ["default", "fmad"]
    assert flags_cli.select(["native_cuda.ex*"]) == ["native_cuda.exp"]


def test_refuses_without_a_cuda_device(capsys, monkeypatch):
    from engine.runtime import native
    monkeypatch.setattr(native, "probe", lambda: (native.RuntimeState.cpu_parity_stub,
                                                  "CuPy is not importable"))
    assert cli.main(["flags", "--capsule", "native_cuda.exp"]) == 2
    err = capsys.readouterr().err
    assert "`flags` compiles the native CUDA kernels under each flag set and runs them, so it " \
           "needs a CUDA device" in err and "cpu-parity-stub: CuPy is not importable" in err


def test_child_commands_and_environment(tmp_path):
    args = cli.build_parser().parse_args(["flags", "--quick", "--exhaustive", "--stride", "65537",
                                          "--jobs", "4"])
    cmds = flags_cli.run_commands(args, "ftz", fm.DEFAULT_POLICY,
                                  ["native_cuda.exp", "native_cuda.add"], tmp_path)
    run, sweep = cmds
    assert run[3:] == ["run", "--device", "cuda", "--suite", "campaign", "--no-progress",
                       "--evidence-dir", str(tmp_path), "--seed", "0", "--capsule",
                       "native_cuda.exp", "native_cuda.add", "--quick", "--jobs", "4"]
    assert sweep[3:] == ["exhaustive", "--device", "cuda", "--stride", "65537", "--evidence-dir",
                         str(tmp_path), "--capsule", "native_cuda.exp"]   # add is not unary
    env = flags_cli.child_env("ftz", fm.DEFAULT_POLICY)
    assert env[flag_sets.FLAG_SET_ENV] == "ftz" and env[flag_sets.DECLARED_FLAG_SET_ENV] == \
        "default"
    assert flag_sets.DECLARED_FLAG_SET_ENV not in flags_cli.child_env("ftz", fm.OWN)


def test_command_runs_each_set_and_mode_then_writes_the_matrix(tmp_path, monkeypatch, capsys):
    """The orchestration without a GPU: the child runs replaced by a stand-in that writes a
    passing record for each capsule it is given (nothing flushed)."""
    calls = []

    def child(cmd, env, label):
        out = Path(cmd[cmd.index("--evidence-dir") + 1])
        rest = cmd[cmd.index("--capsule") + 1:]
        names = rest[:next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]
        calls.append((env[flag_sets.FLAG_SET_ENV], env.get(flag_sets.DECLARED_FLAG_SET_ENV),
                      out.relative_to(tmp_path).as_posix(), names))
        for n in names:
            write_record(out.parent.parent, out.parent.name, out.name, n)
        return 0
    monkeypatch.setattr(flags_cli, "require_cuda", lambda: None)
    monkeypatch.setattr(flags_cli, "_child", child)
    code = cli.main(["flags", "--capsule", "native_cuda.exp", "native_cuda.reshape", "--sets",
                     "fmad,default", "--evidence-dir", str(tmp_path), "--quick"])
    assert calls == [
        ("default", None, "default/own", ["native_cuda.exp", "native_cuda.reshape"]),
        ("fmad", None, "fmad/own", ["native_cuda.exp", "native_cuda.reshape"]),
        ("fmad", "default", "fmad/default-policy", ["native_cuda.exp"]),   # a copy: no change
    ]
    m = json.loads((tmp_path / fm.MATRIX_FILE).read_text())
    assert code == 0 and m["counts"] == {"cells": 6, "met": 5, "unmet": 0, "either": 1,
                                         "either_passed": 1, "by_set": {
                                             "default": {"passed": 2, "failed": 0, "other": 0},
                                             "fmad": {"passed": 4, "failed": 0, "other": 0}}}
    assert "~ passed" in capsys.readouterr().out
