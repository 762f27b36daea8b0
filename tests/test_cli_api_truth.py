"""Issue 38, "The console and the report tell the truth at a glance", the engine's half: the
`torchlean` command names what it was given (a --data-file that is no regular file, a seed out of
range, a device without capsules), says that the trust it prints is the declared one, and runs
gpt2 --steps 0; the Python API takes names for devices and profiles, shows values, has len() and
basic indexing, and names every misuse; the docs list the flags and policy members there are."""
import argparse
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest

import engine
from engine import ops
from engine.cli import main
from engine.errors import (AmbiguousTruthError, Float32OverflowError, IndexOutOfRangeError,
                           IntegerRangeError, NativeRuntimeUnavailable, NoLengthError,
                           NoMaintainedProfileError, ParameterTypeError, TensorIndexError,
                           TorchLeanError)
from engine.runtime.native import native_available
from engine.session import Session, current_session, use_session
from engine.types import Contraction, Device, Reduction, Rounding, Subnormals

REPO = Path(__file__).resolve().parent.parent
SEED_RANGE = "must be a whole number from 0 to 2^64-1 (18446744073709551615)"
LINES = (b"def add(a, b):\n    return a + b\n\n", b"class Point:\n    x = 0\n    y = 1\n\n",
         b"for i in range(10):\n    print(i)\n\n")
TEXT = b"".join(LINES[i % 3] for i in range(400))     # 13466 bytes, as tests/test_gpt2.py


def _cli(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def _usage_error(capsys, *argv) -> str:
    """stderr of an argparse usage error, which exits 2."""
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(TEXT)
    return str(path)


# --- item 14: a --data-file that is no regular file; quickstart_bound's advice -------------------

def test_a_data_file_that_is_no_regular_file_says_what_it_is(capsys, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    for path, what in (("/dev/null", "is a character device, not a regular file; pass the path "
                                     "of a text file"),
                       (str(tmp_path), "is a directory; pass the path of a text file (for "
                                       "example one of the files in it)"),
                       (str(empty), "is empty (0 bytes); pass a file with some text")):
        code, out, err = _cli(capsys, "gpt2", "--data-file", path)
        assert (code, out) == (2, "")
        assert err == f"torchlean: error: --data-file {path} {what}\n"
    code, _, err = _cli(capsys, "gpt2", "--data-file", str(tmp_path / "absent.txt"))
    assert code == 2 and err == (f"torchlean: error: --data-file {tmp_path / 'absent.txt'}: no "
                                 "such file; pass the path of a text file\n")


def test_quickstart_bound_advises_only_what_a_command_accepts(capsys):
    if native_available():
        pytest.skip("a native CUDA runtime is here: the comparison runs")
    from conformance import quickstart_bound
    assert quickstart_bound.main([]) == 2
    err = capsys.readouterr().err
    assert "needs a native CUDA runtime, which is not here (cpu-parity-stub: " in err
    # `--device cpu` only as a flag of the command that has it
    assert err.count("--device cpu") == 1
    assert "train the CPU side alone with `torchlean quickstart_mlp --device cpu`" in err
    with pytest.raises(SystemExit):
        quickstart_bound.main(["--device", "cpu"])
    capsys.readouterr()


# --- item 15: seeds, capsules --device, declared trust ------------------------------------------

@pytest.mark.parametrize("command", ["quickstart_mlp", "cnn_digits", "fno1d", "gpt2"])
@pytest.mark.parametrize("seed", ["-5", "99999999999999999999999", str(2 ** 64), "1.5"])
def test_every_seed_out_of_range_is_a_usage_error(capsys, command, seed):
    err = _usage_error(capsys, command, "--seed", seed)
    assert err.splitlines()[-1] == (f"torchlean {command}: error: argument --seed: {SEED_RANGE}, "
                                    f"got {seed!r}; pass a seed in that range")


def test_the_sample_seed_follows_the_same_rule(capsys):
    err = _usage_error(capsys, "gpt2", "--sample-seed", "-1")
    assert err.splitlines()[-1] == (f"torchlean gpt2: error: argument --sample-seed: "
                                    f"{SEED_RANGE}, got '-1'; pass a seed in that range")


def test_the_largest_seed_runs(capsys):
    code, out, err = _cli(capsys, "quickstart_mlp", "--steps", "1", "--seed", str(2 ** 64 - 1))
    assert code == 0, err
    assert out.startswith("quickstart_mlp: device=cpu profile=checked_cpu "
                          "seed=18446744073709551615 steps=1\n")


def test_capsules_of_a_device_without_capsules_is_a_usage_error(capsys):
    code, out, err = _cli(capsys, "capsules", "--device", "metal")
    assert (code, out) == (2, "")
    assert err == ("torchlean: error: capsules --device metal: no capsule is registered for that "
                   "device; registered devices: cpu, cuda; pass one of them, or leave --device "
                   "out to list every capsule\n")
    code, _, err = _cli(capsys, "capsules", "--device", "gpu")
    assert code == 2 and err.startswith("torchlean: error: unknown device `gpu`; known targets: ")


def test_capsules_and_show_backend_say_the_trust_is_declared(capsys):
    code, out, _ = _cli(capsys, "capsules", "--device", "cpu")
    lines = out.splitlines()
    assert code == 0 and lines
    assert all(" declared-trust=checked " in line and " trust=" not in line for line in lines)
    code, out, _ = _cli(capsys, "capsules", "--device", "cpu", "--json")
    assert {c["declared_trust"] for c in json.loads(out)} == {"checked"}
    code, out, _ = _cli(capsys, "quickstart_mlp", "--steps", "1", "--show-backend")
    assert code == 0
    assert "relu: reference.relu\n  provider=reference declared-trust=checked " \
           "vjp=torchlean-tape\n" in out
    assert " trust=" not in out


def test_help_shows_each_default_once_and_never_none(capsys):
    for command in ("quickstart_mlp", "gpt2", "capsules"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "(default: None)" not in text and "(default: False)" not in text, command
        assert len(re.findall(r"\(default: [^)]*\) \(default:", text)) == 0, command
        if command == "capsules":
            assert ("--device DEVICE only this device's capsules: cpu or cuda (default: every "
                    "device)") in text
        else:
            assert "--seed SEED initialisation seed, 0 to 2^64-1 (default: 2026)" in text


# --- item 16: the Python API -------------------------------------------------------------------

def test_sessions_take_device_and_profile_names():
    s = Session("cpu", profile="checked_cpu")
    assert (s.device, s.profile.name) == (Device.cpu, "checked_cpu")
    with use_session("cpu") as chosen:
        assert isinstance(chosen, Session) and current_session() is chosen
        assert chosen.profile.name == "checked_cpu"
    with pytest.raises(NoMaintainedProfileError, match="no profile named `fastest`"):
        Session("cpu", profile="fastest")
    with pytest.raises(ParameterTypeError) as exc:
        Session("cpu", profile=3)
    assert str(exc.value).startswith("Session(profile=3): the profile must be a name such as "
                                     "'checked_cpu' (or an engine.profile.BackendProfile), got "
                                     "int; known profiles: checked_cpu, ")
    with pytest.raises(ParameterTypeError) as exc:
        with use_session(42):
            pass
    assert str(exc.value) == ("use_session(42): pass an engine.Session, or a device name such "
                              "as 'cpu' or 'cuda'; got int")
    if not native_available():
        with pytest.raises(NativeRuntimeUnavailable):
            with use_session("cuda"):
                pass


def test_reduce_axes_of_the_wrong_type_are_named(cpu_session):
    a = engine.tensor([[1.0, 2.0], [3.0, 4.0]])
    for reduce in (ops.reduce_sum, ops.reduce_mean):
        with pytest.raises(ParameterTypeError) as exc:
            reduce(a, axes=1.5)
        assert str(exc.value) == (f"{reduce.__name__}: axes must be None, an int or a sequence "
                                  "of ints, got float 1.5; pass e.g. axes=1 or axes=(0, 1)")
    assert ops.reduce_sum(a, axes=np.int64(1)).numpy().tolist() == [3.0, 7.0]


def test_arithmetic_with_a_non_number_is_pythons_type_error(cpu_session):
    """NotImplemented, so Python raises its TypeError for the operator (and a type with a
    reflected method of its own would get its turn), not NumPy's ValueError or a NaN tensor."""
    a = engine.tensor([1.0, 2.0])
    for what, other in (("str", "x"), ("NoneType", None), ("list", [1.0, 2.0]),
                        ("complex", 1j)):
        with pytest.raises(TypeError, match=re.escape(
                f"unsupported operand type(s) for +: 'Tensor' and '{what}'")):
            a + other
        with pytest.raises(TypeError, match=re.escape(
                f"unsupported operand type(s) for -: '{what}' and 'Tensor'")):
            other - a
    with pytest.raises(TypeError):
        a * "x"

    class Reflected:
        def __radd__(self, other):
            return "reflected"
    assert a + Reflected() == "reflected"
    with pytest.raises(ParameterTypeError, match="broadcast_pair: `b` is a str; pass a Tensor"):
        ops.broadcast_pair(a, "x")
    with pytest.raises(Float32OverflowError, match=r"1e\+300 is finite but beyond the float32"):
        a * 1e300
    assert (a * 2).numpy().tolist() == [2.0, 4.0]
    assert (a + np.float32(0.5)).numpy().tolist() == [1.5, 2.5]
    assert (a - np.array([1.0, 1.0])).numpy().tolist() == [0.0, 1.0]


def test_an_integer_beyond_int64_is_named_by_its_range(cpu_session):
    with pytest.raises(IntegerRangeError) as exc:
        engine.tensor(2 ** 70)
    assert str(exc.value) == ("tensor(): the integer 1180591620717411303424 is beyond the "
                              "int64/uint64 range (-2^63 to 2^64-1) that tensor() converts; pass "
                              "float(x) (1.1805916e+21 in float32) if its rounding is meant")
    assert isinstance(exc.value, OverflowError)
    with pytest.raises(Float32OverflowError, match="the integer -1606938044258990275541962092341"
                                                   "162602522202993782792835301376 is beyond the "
                                                   "float32 range"):
        engine.tensor([1.5, -2 ** 200])
    assert engine.tensor(float(2 ** 70)).item() == 2.0 ** 70
    assert engine.tensor(2 ** 64 - 1).item() == 2.0 ** 64


def test_repr_shows_values_shape_and_device(cpu_session):
    assert repr(engine.tensor([[1.0, 2.0], [3.0, 4.5]])) == (
        "tensor([[1. , 2. ],\n        [3. , 4.5]], shape=(2, 2), device=cpu)")
    assert repr(engine.tensor(3.25, requires_grad=True)) == \
        "tensor(3.25, shape=(), device=cpu, requires_grad=True)"
    assert repr(engine.tensor(np.zeros((0, 3)))) == "tensor([], shape=(0, 3), device=cpu)"
    big = repr(engine.tensor(np.arange(2000, dtype=np.float32)))
    assert big.startswith("tensor([0.000e+00, 1.000e+00, 2.000e+00, ..., 1.997e+03,")
    assert big.endswith("1.999e+03], shape=(2000,), device=cpu)") and big.count("\n") == 1


def test_len_is_the_first_dimension(cpu_session):
    assert len(engine.tensor(np.zeros((3, 2)))) == 3
    assert len(engine.tensor(np.zeros((0,)))) == 0
    with pytest.raises(NoLengthError) as exc:
        len(engine.tensor(1.0))
    assert isinstance(exc.value, TypeError)
    assert str(exc.value).startswith("len() of a 0-d tensor")


def test_basic_indexing_through_slice_and_reshape(cpu_session):
    a = engine.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], requires_grad=True)
    assert a[0].shape == (3,) and a[0].numpy().tolist() == [1.0, 2.0, 3.0]
    assert a[-1, 1:].numpy().tolist() == [5.0, 6.0]
    assert a[:, 1].numpy().tolist() == [2.0, 5.0]
    assert a[..., -1].numpy().tolist() == [3.0, 6.0]
    assert a[1, 2].shape == () and a[1, 2].item() == 6.0
    assert a[1:1].shape == (0, 3) and a[2:0].shape == (0, 3)
    assert [row.numpy().tolist() for row in a] == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    ops.reduce_sum(a[1, 1:]).backward()
    assert a.grad.numpy().tolist() == [[0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    with pytest.raises(IndexOutOfRangeError, match=re.escape(
            "t[2]: index 2 is out of range for axis 0 of extent 2; pass an index in [-2, 1]")):
        a[2]
    for key, message in (((0, 0, 0), "t[0, 0, 0]: 3 indices for a tensor of shape (2, 3)"),
                         (slice(None, None, 2), "t[::2]: a slice takes integer bounds and step "
                                                "1 only; pick other entries with ops.gather"),
                         ([0, 1], "t[[0, 1]]: an index is an int, a slice of step 1 or `...`, "
                                  "got list [0, 1]; pick several entries with ops.gather"),
                         (None, "t[None]: an index is an int"),
                         (True, "t[True]: an index is an int")):
        with pytest.raises(TensorIndexError) as exc:
            a[key]
        assert str(exc.value).startswith(message), str(exc.value)
    with pytest.raises(TensorIndexError, match=r"t\[0\]: a 0-d tensor has no axis to index"):
        engine.tensor(1.0)[0]


def test_truth_follows_torch(cpu_session):
    assert bool(engine.tensor([2.0])) and not bool(engine.tensor(0.0))
    assert bool(engine.tensor(float("nan")))
    for shape in ((2,), (0,)):
        with pytest.raises(AmbiguousTruthError, match="is ambiguous; use t.item()"):
            bool(engine.tensor(np.ones(shape)))


def test_every_new_error_is_a_named_torchlean_error():
    for error in (IntegerRangeError, NoLengthError, AmbiguousTruthError, TensorIndexError):
        assert issubclass(error, TorchLeanError) and error.__doc__


# --- item 17: the docs -------------------------------------------------------------------------

def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s not in ("-h", "--help")}


def test_readme_synopsis_of_export_trust_lists_every_flag():
    from conformance.cli import build_parser
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    flags = _flags(sub.choices["export-trust"])
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    synopsis = re.search(r"torchlean-conformance export-trust (.*?)\ntorchlean-conformance ",
                         readme, re.S).group(1)
    assert {"--plugin", "--evidence-dir", "--out"} <= flags
    assert flags == set(re.findall(r"--[a-z-]+", synopsis))


def test_plugins_doc_lists_every_policy_member():
    doc = (REPO / "docs" / "PLUGINS.md").read_text(encoding="utf-8")
    section = doc.split("## The numerical policy: what each member promises", 1)[1]
    section = section.split("\n## ", 1)[0]
    for enum in (Rounding, Subnormals, Contraction, Reduction):
        for member in enum:
            row = f"| `{enum.__name__}.{member.name}` | `{member.value}` | "
            assert row in section, row


# --- item 18: gpt2 --steps 0 -------------------------------------------------------------------

def test_gpt2_steps_0_evaluates_and_samples_the_loaded_parameters_unchanged(capsys, tmp_path,
                                                                            corpus_file):
    trained, again = tmp_path / "p.safetensors", tmp_path / "q.safetensors"
    log1, log2 = tmp_path / "train.json", tmp_path / "eval.json"
    code, _, err = _cli(capsys, "gpt2", "--data-file", corpus_file, "--steps", "1",
                        "--generate", "0", "--save-params", str(trained), "--log", str(log1))
    assert code == 0, err
    before = hashlib.sha256(trained.read_bytes()).hexdigest()
    code, out, err = _cli(capsys, "gpt2", "--data-file", corpus_file, "--steps", "0",
                          "--load-params", str(trained), "--generate", "16",
                          "--save-params", str(again), "--log", str(log2))
    assert code == 0, err
    assert hashlib.sha256(trained.read_bytes()).hexdigest() == before
    assert again.read_bytes() == trained.read_bytes()      # saved as loaded: not one bit moved
    first, second = json.loads(log1.read_text()), json.loads(log2.read_text())
    assert second["losses"] == [] and len(second["held_out"]) == 1
    # the same parameters on the same held-out windows: the training run's last held-out loss
    assert second["held_out"][0][1] == first["held_out"][-1][1]
    held = second["held_out"][0][1]
    assert f"loaded parameters from {trained}\n" in out
    assert f"no training step  held-out {held:.6f}\n" in out
    assert f"no training step (--steps 0)  held-out {held:.6f}\n" in out
    assert "final loss" not in out and "sample (seed 0):\ndef " in out
    assert len(second["sample"]) > 0


def test_gpt2_negative_steps_are_refused(capsys):
    code, out, err = _cli(capsys, "gpt2", "--steps", "-1")
    assert (code, out) == (2, "")
    assert err == ("torchlean: error: --steps must be 0 or more, got -1; 0 evaluates and "
                   "samples the loaded (--load-params) parameters without training\n")


def test_one_tensor_where_a_list_of_them_goes_is_named(cpu_session):
    """A tensor iterates over its rows now; concat and the optimizers would have taken those rows
    (copies) for the list of tensors they expect."""
    from engine import optim
    t = engine.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    with pytest.raises(ParameterTypeError, match=re.escape(
            "concat: `tensors` is one Tensor of shape (2, 2); pass a list or tuple of tensors")):
        ops.concat(t)
    for make in (lambda: optim.SGD(t, 0.1), lambda: optim.Adam(t)):
        with pytest.raises(ParameterTypeError, match=re.escape(
                "the optimizer takes a list of parameter tensors, got one Tensor of shape "
                "(2, 2); pass [tensor]")):
            make()
