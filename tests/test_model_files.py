"""Model files that training cannot lose (issue 34): `torchlean gpt2 --save-params` checks its path
before the first step, refuses to overwrite a checkpoint with a diverged run's NaN or inf weights
unless --save-nonfinite, writes through a fsynced `.NAME.tmp-PID` file renamed into place (the
directory fsynced after), cleans up the temp files of killed writers, and prints its sample under
any locale. Each test trains the tiny preset for a step or two (well under a second)."""
import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine import atomic_file
from engine.cli import main
from engine.models import gpt2
from engine.session import Session, use_session

REPO = Path(__file__).resolve().parent.parent
LINES = (b"def add(a, b):\n    return a + b\n\n", b"class Point:\n    x = 0\n    y = 1\n\n")
TEXT = b"".join(LINES[i % 2] for i in range(300))    # 9600 bytes: enough windows for tiny's T 32
TINY = gpt2.preset("tiny")
DIVERGING_LR = "1e38"   # AdamW's first update moves every weight by about lr: float32 overflows


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(TEXT)
    return str(path)


def _gpt2(capsys, corpus_file, *argv):
    code = main(["gpt2", "--data-file", corpus_file, "--generate", "0", "--log-every", "1",
                 *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _leftovers(directory: Path, name="p.safetensors") -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(f".{name}"))


@pytest.fixture
def unwritable_dir(tmp_path):
    """A directory that takes no new file. Root writes through any mode bits (and os.access says
    yes), so as root it is /proc, where creating a regular file fails for everyone."""
    if os.geteuid() == 0:
        if not Path("/proc").is_dir():
            pytest.skip("root without /proc: no directory refuses root a new file here")
        yield Path("/proc")
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    yield locked
    locked.chmod(stat.S_IRWXU)


# -- the path is checked before any step ---------------------------------------------------------

def test_an_unwritable_save_path_is_refused_before_training(capsys, corpus_file, unwritable_dir):
    target = unwritable_dir / "p.safetensors"
    code, out, err = _gpt2(capsys, corpus_file, "--steps", "1", "--save-params", str(target))
    assert (code, out) == (2, "")   # nothing printed: no header, no step ran
    assert err == (f"torchlean: error: --save-params {target}: cannot create a file in "
                   f"{unwritable_dir} ({os.strerror(_create_errno(unwritable_dir))}); pass a file "
                   "path in a writable directory (checked before any work, so no run is lost)\n")


def _create_errno(directory: Path) -> int:
    """The errno that creating a file in `directory` gives here (EACCES, or ENOENT in /proc)."""
    try:
        os.close(os.open(directory / ".errno-probe", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except OSError as exc:
        return exc.errno
    raise AssertionError(f"{directory} took a new file")


def _fifo(directory: Path) -> Path:
    # A non-regular file of the test's own: were the check ever lost, os.replace would swap out
    # this FIFO, not a shared node such as /dev/null (which root may replace).
    os.mkfifo(directory / "fifo")
    return directory / "fifo"


@pytest.mark.parametrize("make_target, message", [
    (lambda d: d, "is a directory; pass a file path such as"),
    (lambda d: d / "absent" / "p.safetensors", "does not exist; pass a file path in an existing"),
    (_fifo, "exists and is not a regular file"),
], ids=["directory", "missing-directory", "fifo"])
def test_bad_save_paths_are_usage_errors_before_training(capsys, tmp_path, corpus_file,
                                                         make_target, message):
    code, out, err = _gpt2(capsys, corpus_file, "--steps", "1",
                           "--save-params", str(make_target(tmp_path)))
    assert (code, out) == (2, "") and err.count("\n") == 1 and message in err, err


def test_the_probe_leaves_nothing_behind(tmp_path):
    assert atomic_file.check_writable(tmp_path / "p.safetensors", "--save-params") == \
        tmp_path / "p.safetensors"
    assert list(tmp_path.iterdir()) == []


def test_missing_safetensors_is_named_before_training(capsys, tmp_path, corpus_file,
                                                      monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)   # import raises ImportError
    code, out, err = _gpt2(capsys, corpus_file, "--save-params", str(tmp_path / "p.safetensors"))
    assert (code, out) == (2, "") and "need the safetensors package; install it" in err, err


def test_save_nonfinite_without_save_params_is_a_usage_error(capsys, corpus_file):
    code, out, err = _gpt2(capsys, corpus_file, "--save-nonfinite")
    assert (code, out) == (2, "")
    assert err == ("torchlean: error: --save-nonfinite is given without --save-params; add "
                   "--save-params PATH or drop --save-nonfinite\n")


# -- non-finite weights --------------------------------------------------------------------------

def test_a_diverged_run_keeps_the_good_checkpoint(capsys, tmp_path, corpus_file):
    pytest.importorskip("safetensors.numpy")
    params = tmp_path / "p.safetensors"
    code, _, err = _gpt2(capsys, corpus_file, "--steps", "1", "--save-params", str(params))
    assert code == 0, err
    good = params.read_bytes()
    code, out, err = _gpt2(capsys, corpus_file, "--steps", "2", "--lr", DIVERGING_LR,
                           "--save-params", str(params))
    assert "loss nan" in out and "saved parameters" not in out   # it did diverge, and said so
    assert code == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"torchlean: error: --save-params {params}: parameter `wte` holds ")
    assert f"the run diverged; {params} is unchanged. Lower --lr, or pass --save-nonfinite" in last
    assert params.read_bytes() == good and _leftovers(tmp_path) == []


def test_save_nonfinite_saves_the_diverged_weights(capsys, tmp_path, corpus_file):
    st = pytest.importorskip("safetensors.numpy")
    params = tmp_path / "p.safetensors"
    code, out, err = _gpt2(capsys, corpus_file, "--steps", "2", "--lr", DIVERGING_LR,
                           "--save-params", str(params), "--save-nonfinite")
    assert code == 0 and "saved parameters to" in out, err
    assert not np.isfinite(st.load_file(str(params))["wte"]).any()


def _tiny_params(seed=1):
    with use_session(Session("cpu")):
        return gpt2.GPT(TINY, seed).named_parameters()


def test_the_refusal_names_the_first_nonfinite_tensor_and_its_count(tmp_path):
    pytest.importorskip("safetensors.numpy")
    from engine.params_file import NonFiniteParamsError, load_params, save_params
    named = _tiny_params()
    names = [name for name, _ in named]
    poisoned = {names[3]: [np.nan, np.nan, np.inf], names[7]: [-np.inf]}   # in model order
    for name, p in named:
        bad = poisoned.get(name, [])
        p.buffer.data[:len(bad)] = bad
    path = tmp_path / "p.safetensors"
    with pytest.raises(NonFiniteParamsError) as info:
        save_params(path, named)
    size = named[3][1].buffer.data.size
    assert str(info.value) == (
        f"--save-params {path}: parameter `{names[3]}` holds 3 non-finite values (NaN or inf) of "
        f"{size}, and 2 of the {len(named)} parameters hold some: the run diverged; no file was "
        "written. Lower --lr, or pass --save-nonfinite to save them anyway")
    assert info.value.exit_code == 1 and list(tmp_path.iterdir()) == []
    save_params(path, named, allow_nonfinite=True)
    reloaded = _tiny_params(seed=2)
    load_params(path, reloaded)
    for (name, saved), (_, back) in zip(named, reloaded):   # NaN payloads too, bit for bit
        assert saved.buffer.data.tobytes() == back.buffer.data.tobytes(), name


# -- the write: temp file, flush, fsync, rename, directory fsync ---------------------------------

def test_the_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch):
    pytest.importorskip("safetensors.numpy")
    from engine.params_file import save_params
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            events.append(("fsync", "dir", st.st_ino))
        else:   # the size shows the buffered bytes were flushed before the fsync
            events.append(("fsync", "file", st.st_ino, st.st_size))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", Path(src).name, Path(dst).name))
        real_replace(src, dst)
    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "p.safetensors"
    save_params(path, _tiny_params())
    final = path.stat()
    assert events == [("fsync", "file", final.st_ino, final.st_size),
                      ("replace", f".p.safetensors.tmp-{os.getpid()}", "p.safetensors"),
                      ("fsync", "dir", tmp_path.stat().st_ino)]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_write_removes_its_temp_file_and_keeps_the_old_one(tmp_path, monkeypatch,
                                                                    failing):
    pytest.importorskip("safetensors.numpy")
    from engine.params_file import save_params
    path = tmp_path / "p.safetensors"
    path.write_bytes(b"the previous checkpoint")

    def disk_full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, failing, disk_full)
    with pytest.raises(atomic_file.WriteFailedError) as info:
        save_params(path, _tiny_params())
    assert str(info.value) == (f"--save-params {path}: writing failed (No space left on device); "
                               f"{path} is unchanged; free space or fix the path's permissions, "
                               "then run again")
    assert info.value.exit_code == 4
    assert path.read_bytes() == b"the previous checkpoint" and _leftovers(tmp_path) == []


def test_a_write_failing_after_training_exits_4(capsys, tmp_path, corpus_file, monkeypatch):
    pytest.importorskip("safetensors.numpy")
    params = tmp_path / "p.safetensors"

    def io_error(*args):
        raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(os, "replace", io_error)
    code, out, err = _gpt2(capsys, corpus_file, "--steps", "1", "--save-params", str(params))
    assert code == 4 and "step     0" in out
    assert err == (f"torchlean: error: --save-params {params}: writing failed (Input/output "
                   f"error); {params} is unchanged; free space or fix the path's permissions, "
                   "then run again\n")
    assert list(tmp_path.iterdir()) == [Path(corpus_file)]


# -- temp files of killed writers ----------------------------------------------------------------

KILLED_MID_WRITE = """
import os, signal, sys
from engine.models import gpt2
from engine.params_file import save_params
from engine.session import Session, use_session
os.replace = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)   # kill -9 before the rename
with use_session(Session("cpu")):
    save_params(sys.argv[1], gpt2.GPT(gpt2.preset("tiny"), 1).named_parameters())
"""


def test_a_kill_mid_write_leaves_a_named_temp_file_that_the_next_save_removes(tmp_path):
    pytest.importorskip("safetensors.numpy")
    from engine.params_file import save_params
    path = tmp_path / "p.safetensors"
    path.write_bytes(b"the previous checkpoint")
    child = subprocess.run([sys.executable, "-c", KILLED_MID_WRITE, str(path)], cwd=REPO,
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    # Which pid the child had is not observable from here: the leftover's name says it.
    (leftover,) = _leftovers(tmp_path)
    dead_pid = int(leftover.removeprefix(".p.safetensors.tmp-"))
    assert path.read_bytes() == b"the previous checkpoint"
    others = [".p.safetensors.tmp-1",       # pid 1 always runs: a live writer's file stays
              ".p.safetensors.tmp-backup",   # not a pid: not ours to remove
              f".q.safetensors.tmp-{dead_pid}"]   # another target's
    for name in others:
        (tmp_path / name).write_bytes(b"")
    save_params(path, _tiny_params())
    assert _leftovers(tmp_path) == sorted(others[:2]) and (tmp_path / others[2]).exists()
    assert path.read_bytes() != b"the previous checkpoint"


# -- the sample prints under any locale ----------------------------------------------------------

def _ascii_env(**settings) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LC_", "LANG", "PYTHONUTF8", "PYTHONIOENCODING"))}
    return {**env, **settings}


@pytest.mark.parametrize("env, prompt", [
    (_ascii_env(LC_ALL="C", PYTHONIOENCODING="ascii"), "é"),
    # no UTF-8 mode: argv's non-ASCII bytes arrive as lone surrogates, stdout is ASCII
    (_ascii_env(LC_ALL="C", PYTHONUTF8="0"), "é".encode()),
], ids=["PYTHONIOENCODING=ascii", "PYTHONUTF8=0"])
def test_the_sample_prints_under_an_ascii_locale(tmp_path, corpus_file, env, prompt):
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "gpt2", "--data-file", corpus_file,
                           "--steps", "1", "--generate", "4", "--prompt", prompt],
                          cwd=REPO, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    lines = proc.stdout.decode("ascii").splitlines()
    assert lines[-2] == "sample (seed 0):"
    assert lines[-1].startswith("\\xe9")   # the prompt's byte pair, decoded, then escaped


def test_printing_restores_the_stdout_error_handler(corpus_file, monkeypatch):
    import io
    stream = io.TextIOWrapper(io.BytesIO(), encoding="ascii", errors="strict")
    monkeypatch.setattr(sys, "stdout", stream)
    assert main(["gpt2", "--data-file", corpus_file, "--steps", "1", "--generate", "2",
                 "--prompt", "\u00e9\ufffd"]) == 0
    stream.flush()
    assert stream.errors == "strict"
    assert stream.buffer.getvalue().splitlines()[-1].startswith(b"\\xe9\\ufffd")
