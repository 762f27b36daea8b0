"""Evidence cannot be overwritten or escape its directory, one run writes a directory at a time,
SIGINT stops a run cleanly, and every reader survives corrupt files (issue 10)."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conformance import evidence
from conformance.evidence_dir import (EvidenceDirBusyError, EvidenceDirError, EvidenceLock,
                                      record_path)
from conformance.fingerprint import fingerprint
from conformance.plugins import PluginError, plugin_handlers
from engine.capsule import standard_capsule
from engine.errors import CapsuleNameError
from engine.types import (BackendOp as Op, Contraction, Device, NumericalPolicy, Provider,
                          Reduction, Rounding, Subnormals, TrustLevel, VJPMode)

REPO = Path(__file__).resolve().parent.parent
POLICY = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                         Contraction.not_applicable, Reduction.not_applicable)


def cli(*args, cwd=REPO, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "conformance.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})


def _capsule(name):
    return standard_capsule(Op.add, Provider.external, Device.cpu, trust=TrustLevel.fuzzed,
                            vjp_mode=VJPMode.torchlean_tape, policy=POLICY, source_file="x.py",
                            name=name)


@pytest.mark.parametrize("name", ["user/../../escaped_evidence", "../x.add", "user..add",
                                  "user.add-on", "add", "user. add", "user/add", 5])
def test_capsule_names_must_be_dotted_identifiers(name):
    with pytest.raises(CapsuleNameError, match="not a dotted identifier"):
        _capsule(name)


def test_record_paths_stay_inside_the_evidence_directory(tmp_path):
    assert record_path(tmp_path, "user.my_add") == tmp_path / "user.my_add.json"
    with pytest.raises(CapsuleNameError):
        record_path(tmp_path, "user/../../escaped")
    (tmp_path / "user.link.json").symlink_to(tmp_path.parent / "elsewhere.json")
    with pytest.raises(EvidenceDirError, match="outside the evidence directory"):
        record_path(tmp_path, "user.link")


PLUGIN = textwrap.dedent('''
    import numpy as np
    from conformance.plugins import PluginEntry
    from engine.capsule import standard_capsule
    from engine.types import (BackendOp, Contraction, Device, NumericalPolicy, Provider,
                              Reduction, Rounding, Subnormals, TrustLevel, VJPMode)
    P = NumericalPolicy(Rounding.nearest_even, Subnormals.gradual_underflow,
                        Contraction.not_applicable, Reduction.not_applicable)

    def cap(name, mode=VJPMode.torchlean_tape):
        return standard_capsule(BackendOp.add, Provider.external, Device.cpu,
                                trust=TrustLevel.fuzzed, vjp_mode=mode, policy=P,
                                source_file="p.py", name=name)

    SHADOW = [PluginEntry(cap("reference.add"), np.add)]
    TWICE = [PluginEntry(cap("user.add"), np.add), PluginEntry(cap("user.add"), np.add)]
    TAPE_WITH_VJP = [PluginEntry(cap("user.add"), np.add, lambda i, o, g: (g, g))]
    GOOD = [PluginEntry(cap("user.add"), np.add)]

    def RAISES():
        raise RuntimeError("factory broke")
''')


@pytest.fixture
def plugin_module(tmp_path, monkeypatch):
    (tmp_path / "my_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_plugin", None)
    yield "my_plugin"
    sys.modules.pop("my_plugin", None)


@pytest.mark.parametrize("attr, message", [
    ("SHADOW", "capsule name `reference.add` is already used by a built-in capsule"),
    ("TWICE", "capsule name `user.add` is already used by plugin `my_plugin:TWICE`"),
    ("TAPE_WITH_VJP", "gives a vjp function but declares vjp=torchlean-tape"),
    ("RAISES", "the factory raised RuntimeError: factory broke"),
])
def test_plugins_may_not_shadow_repeat_or_mislabel(plugin_module, attr, message):
    with pytest.raises(PluginError, match=message.replace("(", r"\(")):
        plugin_handlers(f"{plugin_module}:{attr}")


def test_two_plugins_may_not_share_a_name(plugin_module):
    taken = {}
    plugin_handlers(f"{plugin_module}:GOOD", taken)
    with pytest.raises(PluginError, match="already used by plugin `my_plugin:GOOD`"):
        plugin_handlers(f"{plugin_module}:GOOD", taken)


def test_one_name_on_two_devices_is_one_capsule_per_run(plugin_module):
    # JAX's peer gives xla.<op> on cpu and on cuda: on a machine with both, its CUDA audit once
    # stopped at load (`xla.add is already used`); a run sees its own device's entry, and the
    # same name twice on one device is still refused
    spec = "fixtures.plugins.one_name_two_devices:ENTRIES"
    for device in ("cpu", "cuda"):
        (cap, _), = plugin_handlers(spec, device=device).values()
        assert cap.name == "user.add_on_both" and cap.device.label == device
    with pytest.raises(PluginError, match="`user.add_on_both` is already used by plugin"):
        plugin_handlers(spec)
    with pytest.raises(PluginError, match="`user.add` is already used by plugin"):
        plugin_handlers(f"{plugin_module}:TWICE", device="cpu")


def test_a_cpu_run_audits_the_cpu_entry_of_a_name_on_two_devices(tmp_path):
    out = subprocess.run([sys.executable, "-m", "conformance.cli", "run", "--quick",
                          "--plugin", "fixtures.plugins.one_name_two_devices:ENTRIES",
                          "--evidence-dir", str(tmp_path), "--no-progress", "--seed", "3"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "1 of 1 capsules without failures" in out.stdout
    record = json.loads((tmp_path / "user.add_on_both.json").read_text())
    assert record["capsule"]["device"] == "cpu"


def test_one_writer_per_evidence_directory(tmp_path):
    with EvidenceLock(tmp_path):
        with pytest.raises(EvidenceDirBusyError, match=rf"in use by another run \(pid "
                                                        rf"{os.getpid()} on "):
            with EvidenceLock(tmp_path):
                pass
    with EvidenceLock(tmp_path):   # released: taken again
        pass


def test_a_second_run_into_a_busy_directory_is_refused(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f'''
        import time
        from conformance.evidence_dir import EvidenceLock
        with EvidenceLock({str(tmp_path)!r}):
            print("held", flush=True)
            time.sleep(60)
    ''')], cwd=REPO, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert holder.stdout.readline().strip() == "held"
        out = cli("run", "--quick", "--capsule", "reference.abs", "--evidence-dir", str(tmp_path))
        assert out.returncode == 2 and "is in use by another run (pid" in out.stderr
        assert not (tmp_path / "reference.abs.json").exists()
    finally:
        holder.kill()
        holder.wait()


def test_an_evidence_dir_that_is_a_file_is_refused_before_any_work(tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    out = cli("run", "--quick", "--capsule", "reference.abs", "--evidence-dir", str(f))
    assert out.returncode == 2 and "is a file, not a directory" in out.stderr


def test_resume_needs_the_same_settings(tmp_path):
    from conformance.campaign import Settings
    from engine.registry import registry
    cap, handler = registry().get("reference.abs")
    settings = Settings.for_run(None, 0, True).to_json()
    fp = fingerprint(cap, handler)
    cases = {"total": 2, "failed": 0, "skipped": 0,
             "by_class": {"normal": {"run": 2, "failed": 0, "skipped": 0}}}
    rec = evidence.make_record(cap, {"status": "passed", "settings": settings, "cases": cases},
                               fp, "cpu")
    path = tmp_path / "reference.abs.json"
    evidence.write_atomic(path, rec)
    assert evidence.resumable(path, fp, settings, None) is not None
    # a passed record that judged nothing contradicts itself: run again, never reused
    evidence.write_atomic(path, {**rec, "cases": {**cases, "total": 0, "by_class": {}}})
    assert evidence.resumable(path, fp, settings, None) is None
    evidence.write_atomic(path, rec)
    for change in ({"seed": 1}, {"cases": 3}, {"deterministic_reductions": True},
                   {"poison": False}, {"harness": "x"}):
        assert evidence.resumable(path, fp, {**settings, **change}, None) is None, change
    assert evidence.resumable(path, fp, settings, "some.plugin:X") is None
    for status in ("interrupted",):
        evidence.write_atomic(path, {**rec, "status": status})
        assert evidence.resumable(path, fp, settings, None) is None


def test_records_are_written_world_readable_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        evidence.write_atomic(tmp_path / "x.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "x.json").stat().st_mode & 0o777 == 0o644


# --- corrupt evidence ---------------------------------------------------------------------------

CORRUPT = {
    "truncated": b'{"schema": "torchlean-conformance-evidence", "schema_ver',
    "empty": b"",
    "list": b"[]",
    "text": b'"text"',
    "not-utf8": b'{"schema": "\xff\xfe"}',
    "bare-header": json.dumps({"schema": "torchlean-conformance-evidence",
                               "schema_version": 1}).encode(),
    "wrong-types": json.dumps({"schema": "torchlean-conformance-evidence", "schema_version": 2,
                               "capsule": {"name": "reference.abs", "op": "abs",
                                           "provider": "reference", "device": "cpu"},
                               "status": ["passed"], "settings": {}, "cases": [],
                               "failure_reasons": {}, "counterexamples": {},
                               "fingerprint": {"value": 3}, "environment": {}}).encode(),
    "future-version": json.dumps({"schema": "torchlean-conformance-evidence",
                                  "schema_version": 99}).encode(),
}


@pytest.mark.parametrize("kind", sorted(CORRUPT))
def test_load_record_names_every_corrupt_kind(tmp_path, kind):
    path = tmp_path / "reference.abs.json"
    path.write_bytes(CORRUPT[kind])
    with pytest.raises(evidence.EvidenceError) as exc:
        evidence.load_record(path)
    assert str(path) in str(exc.value) and "--fresh" in str(exc.value)


def test_export_trust_warns_about_each_corrupt_record_and_exits_1(tmp_path):
    ev = tmp_path / "ev"
    ev.mkdir()
    names = ["reference.abs", "reference.add", "reference.relu", "reference.exp"]
    for name, kind in zip(names, ["truncated", "bare-header", "list", "not-utf8"]):
        (ev / f"{name}.json").write_bytes(CORRUPT[kind])
    out = cli("export-trust", "--evidence-dir", str(ev))
    assert out.returncode == 1, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 4 and all("--fresh" in w for w in warnings)
    doc = json.loads((ev / "trust.json").read_text())
    assert all(doc["capsules"][n]["earned"] is None for n in names)
    assert "is not valid JSON" in doc["capsules"]["reference.abs"]["reason"]
    assert "`status` is missing" in doc["capsules"]["reference.add"]["reason"]


@pytest.mark.parametrize("content, message", [
    (b"[]", "holds a JSON list, not an object"),
    (b"\xff\xfe", "is not UTF-8 text"),
    (b'{"format": "torchlean-conformance-replay", "version": 1}', "has no `case` object"),
    (b'{"format": "torchlean-conformance-replay", "capsule": "reference.abs", '
     b'"case": {"op": "abs"}}', "lacks `class`"),
])
def test_replay_survives_corrupt_files(tmp_path, content, message):
    path = tmp_path / "r.json"
    path.write_bytes(content)
    out = cli("replay", str(path))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


# --- SIGINT ---------------------------------------------------------------------------------------

def test_sigint_stops_the_run_records_interrupted_and_resume_reruns(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "conformance.cli", "run", "--suite", "campaign", "--jobs", "2",
         "--no-progress", "--capsule", "reference.*", "--evidence-dir", str(tmp_path)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True,
        # a shell's background job (and so a CI runner) may start us with SIGINT ignored, which a
        # child inherits and Python then leaves alone: a terminal's Ctrl-C has it at default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob("reference.*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)         # Ctrl-C: the whole process group
    t0 = time.monotonic()
    out, err = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 5, "SIGINT took more than 5 s to stop the run"
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted:" in err
    assert "capsule" in out.splitlines()[0]            # the summary was printed
    statuses = {p.stem: json.loads(p.read_text())["status"] for p in tmp_path.glob("*.json")
                if not p.name.startswith(".")}
    interrupted = [n for n, s in statuses.items() if s == "interrupted"]
    assert interrupted and "crashed" not in statuses.values()
    again = cli("run", "--suite", "campaign", "--capsule", interrupted[0], "--evidence-dir",
                str(tmp_path))
    assert f"{interrupted[0]}: passed" in again.stderr and "(resumed)" not in again.stderr
    assert again.returncode == 0, again.stdout


def test_plugin_load_errors_are_named(tmp_path, monkeypatch):
    (tmp_path / "broken_syntax.py").write_text("def f(:\n    pass\n")
    (tmp_path / "wrong_fields.py").write_text(textwrap.dedent('''
        from conformance.plugins import PluginEntry
        ENTRIES = [PluginEntry("not a capsule", "not callable")]
    '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"module `broken_syntax` has a syntax error"):
        plugin_handlers("broken_syntax:X")
    with pytest.raises(PluginError, match=r"entry 0: capsule is a str, not a KernelCapsule; "
                                          r"forward is a str, not callable"):
        plugin_handlers("wrong_fields:ENTRIES")


def test_a_harness_error_is_kept_apart_and_exits_3(monkeypatch):
    """The harness's own code raising (here the comparison) is recorded as a harness error with
    its traceback, never as the kernel's verdict, and the command's exit code says so."""
    from conformance import cli, error_models
    from conformance.campaign import Settings, run_campaign
    from engine.registry import registry

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a harness defect")
    monkeypatch.setattr(error_models, "compare", broken)
    cap, handler = registry().get("reference.abs")
    result = run_campaign(cap, handler, Settings.for_run(None, 0, True))
    assert result["status"] == "harness-error" and result["failure_reasons"] == {}
    err = result["harness_errors"][0]
    assert err["where"] == "compare" and "ZeroDivisionError: a harness defect" in err["error"]
    assert "Traceback" in err["traceback"]
    assert cli.exit_code([{"status": "harness-error"}, {"status": "passed"}]) == cli.EXIT_HARNESS
    assert cli.exit_code([{"status": "harness-error"}, {"status": "failed"}]) == cli.EXIT_FAILED
    assert cli.exit_code([{"status": "interrupted"}, {"status": "failed"}]) == 130
