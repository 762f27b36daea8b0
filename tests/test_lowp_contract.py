"""Peer contracts in the 16-bit judge (conformance/lowp/conventions.py): under PyTorch's contract,
chosen by the plugin spec of our PyTorch 16-bit module, a result that holds exactly the value of
one of PyTorch's conventions is a difference, listed with its clause, never a failure; any other
failing result stays a failure, a wrong value where a clause governs included; a kernel audited
through any other spec gets no contract. Checked on NumPy stand-ins that keep PyTorch's
conventions (fixtures/plugins/low_precision_torch_conventions.py), on the values PyTorch 2.11's
CUDA kernels returned on an H100 (evidence/lowp/torch-cuda-h100/), and, where torch is
importable, on PyTorch's CPU kernels (no test needs torch)."""
from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ml_dtypes")
from conformance.lowp import binary, trust   # noqa: E402
from conformance.lowp.formats import FORMATS   # noqa: E402
from conformance.lowp.kernel import ACCUMULATING, BINARY   # noqa: E402
from conformance.lowp.refs import reference   # noqa: E402
from conformance.lowp.replay import judge_replay   # noqa: E402
from conformance.lowp.sweep import sweep   # noqa: E402
from conformance.peers.contracts import lowp_contract_for   # noqa: E402
from conformance.peers.torch_contract import LOWP_OPS   # noqa: E402
from fixtures.plugins import low_precision_torch_conventions as fx   # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PEER = "conformance.peers.torch_lowp:ENTRIES"
PEER_SPECS = (PEER, "conformance.peers.torch_lowp:BINARY_ENTRIES",
              "conformance.peers.torch_lowp:ADD_MUL")
FIXTURE = "fixtures.plugins.low_precision_torch_conventions"
H100 = REPO / "evidence" / "lowp" / "torch-cuda-h100"
ROWS = binary.select_rows(4096)     # 16 rows and the special ones: the -0/+0 ties among them
TIE_CLAUSE, NAN_CLAUSE = "tie-returns-second-operand", "nan-input-gradient"


def _nan_patterns(fmt) -> int:
    return int(np.isnan(fmt.decode(fmt.all_bits())).sum())


def _judge(kernel, contract) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if kernel.op in BINARY:
            return binary.sweep_pairs(kernel, "cpu", ROWS, contract=contract)
        return sweep(kernel, contract)


def _clauses(rec: dict) -> dict:
    return {name: c["elements"] for name, c in rec["differences"]["clauses"].items()}


def _reasons(rec: dict) -> int:
    return sum(rec["failure_reasons"].values())


def test_the_contract_is_chosen_by_the_plugin_spec_and_the_op():
    for spec in PEER_SPECS:
        for op in ("abs", "relu", "max", "min"):
            contract = lowp_contract_for(spec, op)
            assert contract.peer == "PyTorch" and contract.op == op, (spec, op)
        for op in ("exp", "tanh", "add", "mul", "sum", "attention"):
            assert lowp_contract_for(spec, op) is None, (spec, op)
    # the same kernels through any other spec, or none, get no contract
    for spec in (f"{FIXTURE}:ALL", "fixtures.plugins.low_precision_binary:ALL", None, ""):
        assert lowp_contract_for(spec, "relu") is None and lowp_contract_for(spec, "max") is None
    # the accumulating audit takes no contract: no clause governs one of its ops
    assert not set(LOWP_OPS) & set(ACCUMULATING)


@pytest.mark.parametrize("kernel", fx.HONEST, ids=lambda k: k.name)
def test_pytorchs_conventions_are_differences_not_failures(kernel):
    contract = lowp_contract_for(PEER, kernel.op)
    ours = _judge(kernel, None)
    assert ours["status"] == "failed" and "differences" not in ours
    peer = _judge(kernel, contract)
    assert peer["status"] == "passed", peer["failure_reasons"]
    assert peer["failure_reasons"] == {} and peer["counterexamples"] == []
    assert trust.contradictions(peer) == []          # its counts agree with `passed`
    # exactly the results TorchLean's contract failed are explained, each by its clause
    if kernel.op in BINARY:   # max(-0, +0) and max(+0, -0): the second operand, a zero
        assert ours["failure_reasons"] == {"signed-zero": 2} and _clauses(peer) == {TIE_CLAUSE: 2}
        clause = peer["differences"]["clauses"][TIE_CLAUSE]
        assert clause["class"] == "undocumented" and clause["by_part"] == {"forward": 2}
        assert clause["example"] == {"part": "forward", "input": "0x8000, 0x0000",
                                     "expected": "0x8000", "got": "0x0000"}
    else:                     # the VJP at every NaN input: PyTorch's 0 (abs), g (relu)
        n = _nan_patterns(kernel.fmt)
        assert _reasons(ours) == ours["vjp"]["failed"] == n and _clauses(peer) == {NAN_CLAUSE: n}
        clause = peer["differences"]["clauses"][NAN_CLAUSE]
        assert clause["class"] == "convention" and clause["by_part"] == {"vjp": n}
        one = kernel.fmt.hex(1.0)
        assert clause["example"]["got"] == ("0x0000" if kernel.op == "abs" else one)
        assert peer["vjp"]["not_correctly_rounded"] == 0 and ours["vjp"]["not_correctly_rounded"]
    assert peer["differences"]["peer"] == "PyTorch"
    level, why = trust.earned(peer, {}, peer.get("harness"), {})
    assert level is None and why.startswith("meets PyTorch's own contract but differs from "
                                            "TorchLean's: ")


@pytest.mark.parametrize("kernel, reasons", fx.BUGGY, ids=lambda k: getattr(k, "name", ""))
def test_a_wrong_value_stays_a_failure(kernel, reasons):
    rec = _judge(kernel, lowp_contract_for(PEER, kernel.op))
    assert rec["status"] == "failed" and set(rec["failure_reasons"]) == reasons
    ours = _judge(kernel, None)     # only the explained results left the failures
    assert _reasons(ours) - _reasons(rec) == sum(_clauses(rec).values())
    fmt = kernel.fmt
    if kernel.op == "relu":   # g * heaviside(x, 0): NaN at every NaN input, where g is PyTorch's
        assert rec["failure_reasons"] == {"vjp-nan-mismatch": _nan_patterns(fmt)}
    elif kernel.op == "abs":  # -g at NaN (PyTorch: 0), g at -0 and +0 (PyTorch: 0)
        assert rec["failure_reasons"] == {"vjp-nan-mismatch": _nan_patterns(fmt),
                                          "vjp-not-correctly-rounded": 2}
    elif kernel.name.startswith("tie_mean"):   # ties of the largest finite values: infinity
        assert rec["failure_reasons"] == {"inf-mismatch": 2}
        assert {c["input"] for c in rec["counterexamples"]} == {"0x7f7f, 0x7f7f"}
        assert _clauses(rec) == {TIE_CLAUSE: 1}     # its +0 of (-0, +0) is PyTorch's
    else:       # the second operand off the ties, where the tie clause's rule would give it
        assert rec["failure_reasons"] == ours["failure_reasons"] and _clauses(rec) == {}
    if kernel.op != "max":
        assert _clauses(rec) == {}


def _h100_records():
    recs = [json.loads(p.read_text()) for p in sorted(H100.glob("lowp-*.json"))]
    return [r for r in recs if r["op"] not in ACCUMULATING]


def _recorded_element(rec: dict, ex: dict, plugin: str) -> str:
    """The recorded counterexample judged again from the H100's returned bits, as `lowp
    --replay` judges it, with the contract `plugin` gets."""
    fmt = FORMATS[rec["storage"]]
    x = np.array([int(ex["input"], 16)], dtype=np.uint16)
    got = np.array([int(ex["got"], 16)], dtype=np.uint16)
    vjp = ex["reason"].startswith("vjp-")
    doc = {"plugin": plugin, "op": rec["op"], "storage": rec["storage"], "element": (0,),
           "kind": "vjp" if vjp else "unary",
           "bound_ulps": rec["vjp"]["bound_ulps"] if vjp else rec["bound_ulps"]}
    bits = [x, fmt.encode(np.array([1.0]))] if vjp else [x]
    # the forward the VJP's rules read: the reference's, as every forward of abs and relu on the
    # H100 was (their records list VJP failures only, under a 0.5 ulp bound)
    out = fmt.encode(reference(fmt, rec["op"], fmt.decode(x))[0]) if vjp else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return judge_replay(doc, bits, got, out)[0]


def test_the_h100_records_failures_that_pytorchs_contract_explains():
    """abs's and relu's VJP failures on the H100 are PyTorch's values at NaN (0 and g), one per
    NaN pattern of the format; every other recorded failure stays one under PyTorch's contract."""
    recs = _h100_records()
    assert len(recs) == 26
    explained = set()
    for rec in recs:
        if rec["op"] in ("abs", "relu"):
            assert rec["failure_reasons"] == {
                "vjp-nan-mismatch" if rec["op"] == "abs" else "vjp-not-correctly-rounded":
                _nan_patterns(FORMATS[rec["storage"]])}
        for ex in rec["counterexamples"]:
            assert _recorded_element(rec, ex, f"{FIXTURE}:ALL") == ex["reason"], ex
            now = _recorded_element(rec, ex, PEER)
            if rec["op"] in ("abs", "relu"):
                assert now == "", (rec["kernel"], ex)
                explained.add(rec["kernel"])
            else:
                assert now == ex["reason"], (rec["kernel"], ex)
    assert explained == {f"torch.cuda.{op}.{f}" for op in ("abs", "relu")
                         for f in ("bfloat16", "float16")}


def _cli(*args: str, contract_for_fixture: bool = False) -> subprocess.CompletedProcess:
    """`torchlean-conformance ...`; with `contract_for_fixture`, in a process where the fixture's
    spec is given PyTorch's 16-bit contracts, as our PyTorch module's specs are."""
    patch = ("import conformance.peers.contracts as c; "
             f"c.LOWP_CONTRACTS['{FIXTURE}:ALL'] = c._torch_lowp_contracts; "
             if contract_for_fixture else "")
    code = f"import sys; {patch}from conformance.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def test_through_another_spec_the_same_conventions_are_failures(tmp_path):
    proc = _cli("lowp", "--plugin", f"{FIXTURE}:RELU", "--evidence-dir", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for p in tmp_path.glob("lowp-*.json"):
        rec = json.loads(p.read_text())
        assert rec["status"] == "failed" and "differences" not in rec
        assert rec["failure_reasons"] == {"vjp-not-correctly-rounded":
                                          _nan_patterns(FORMATS[rec["storage"]])}
    assert "conventions, not failures" not in proc.stdout


@pytest.fixture(scope="module")
def peer_run(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("contract")
    proc = _cli("lowp", "--plugin", f"{FIXTURE}:ALL", "--pair-stride", "4096", "--evidence-dir",
                str(out), contract_for_fixture=True)
    assert proc.returncode == 1, proc.stdout + proc.stderr      # the buggy ones fail
    return out, proc.stdout


def test_the_cli_lists_differences_apart_and_trust_earns_nothing_for_them(peer_run):
    out, stdout = peer_run
    recs = {json.loads(p.read_text())["kernel"]: json.loads(p.read_text())
            for p in out.glob("lowp-*.json")}
    assert len(recs) == len(fx.ALL)
    for k in fx.HONEST:
        assert recs[k.name]["status"] == "passed" and recs[k.name]["differences"]["clauses"]
    for k, _ in fx.BUGGY:
        assert recs[k.name]["status"] == "failed"
    assert "torchlike_bfloat16_relu" in stdout and \
        "passed; PyTorch's conventions, not failures: nan-input-gradient x254 elements" in stdout
    assert f"passed; PyTorch's conventions, not failures: {TIE_CLAUSE} x2 elements" in stdout
    proc = _cli("export-trust", "--lowp", str(out))
    assert proc.returncode == 0, proc.stderr
    kernels = json.loads((out / "trust-lowp.json").read_text())["kernels"]
    relu = kernels["torchlike_float16_relu"]
    assert relu["earned"] is None and relu["status"] == "passed"
    assert relu["differences"] == "nan-input-gradient x2046 elements"
    assert relu["reason"] == ("meets PyTorch's own contract but differs from TorchLean's: "
                              "nan-input-gradient x2046 elements")
    assert kernels["heaviside_bfloat16_relu"]["reason"] == "status `failed`"


def test_the_report_shows_differences_apart_from_failures(peer_run):
    from reports.lowp import build_lowp

    class _Dir:
        path, slug, label = str(peer_run[0]), "d", "d"

    class _Report:
        directories = [_Dir()]
    views = {v.kernel: v for v in build_lowp(_Report()).sections[0].kernels}
    relu = views["torchlike_bfloat16_relu"]
    assert relu.status == "passed" and relu.reasons == []
    assert relu.peer == "PyTorch" and relu.differences == [(NAN_CLAUSE, "convention", 254)]
    bad = views["heaviside_bfloat16_relu"]
    assert bad.reasons == [("vjp-nan-mismatch", 254)] and bad.differences == []
    assert views["tie_mean_bfloat16_max"].differences == [(TIE_CLAUSE, "undocumented", 1)]


def test_a_replay_is_judged_under_the_runs_contract(peer_run):
    out, _ = peer_run
    rec = json.loads((out / "lowp-heaviside_bfloat16_relu.json").read_text())
    replay = out / rec["counterexamples"][0]["replay"]
    doc = json.loads(replay.read_text())
    assert doc["kind"] == "vjp" and doc["reproduced"] is True
    proc = _cli("lowp", "--replay", str(replay), contract_for_fixture=True)
    assert proc.returncode == 1 and proc.stdout.startswith("still fails"), proc.stdout
    # the value PyTorch's rule gives there (g) passes the replay under its contract only (here
    # the fixture's spec gets none: the file's spec chooses)
    bits = [np.array([int(doc["inputs"][0]["bits"][0], 16)], dtype=np.uint16),
            np.array([0x3f80], dtype=np.uint16)]
    g, nan = np.array([0x3f80], dtype=np.uint16), np.array([0x7fc0], dtype=np.uint16)
    assert judge_replay({**doc, "plugin": PEER}, bits, g, nan)[0] == ""
    assert judge_replay(doc, bits, g, nan)[0] == "vjp-not-correctly-rounded"


def test_pytorchs_cpu_kernels_pass_with_their_conventions_listed():
    """Optional: torch's CPU abs and relu (all 2^16 inputs and VJPs), maximum and minimum (a
    sample of pairs) in both formats under the contract its spec gets."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("these are PyTorch's CPU kernels' verdicts; this torch sees a GPU")
    from conformance.peers import torch_lowp
    kernels = [k for k in torch_lowp.ENTRIES() if k.op in ("abs", "relu")] + \
        torch_lowp.BINARY_ENTRIES(("max", "min"))
    for k in kernels:
        rec = _judge(k, lowp_contract_for(PEER, k.op))
        if k.op in BINARY:          # its vectorized loop returns the second operand of a tie
            assert rec["status"] == "passed" and _clauses(rec) == {TIE_CLAUSE: 2}, k.name
            continue
        assert _clauses(rec) == {NAN_CLAUSE: _nan_patterns(k.fmt)}, k.name
        # relu(-0) is -0 on the CPU: TorchLean's +0, and no convention PyTorch writes down
        assert rec["failure_reasons"] == ({} if k.op == "abs" else {"signed-zero": 1}), k.name


@pytest.mark.parametrize("kernel", fx.BINARY_VJP, ids=lambda k: k.name)
def test_a_binary_vjps_nan_convention_is_a_difference_in_its_vjp_part(kernel):
    """maximum's and minimum's backward at a NaN operand gives g to both (PyTorch's documented
    convention: the gradient there is arbitrary), where TorchLean gives g to the NaN one(s)."""
    from conformance.lowp.binary_vjp import sweep_vjp, with_vjp
    contract = lowp_contract_for(PEER, kernel.op)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ours = sweep_vjp(kernel, "cpu", ROWS, seed=1)
        peer = with_vjp(_judge(kernel, contract), sweep_vjp(kernel, "cpu", ROWS, seed=1,
                                                            contract=contract))
    assert ours["failed"]     # the non-NaN operand's g where TorchLean gives it +0: any reason
    assert peer["status"] == "passed", peer["failure_reasons"]
    clauses = peer["differences"]["clauses"]
    assert clauses[NAN_CLAUSE]["by_part"] == {"vjp": ours["failed"]}
    assert clauses[TIE_CLAUSE]["by_part"] == {"forward": 2}     # the forward's, merged
    assert "differences" not in peer["vjp"] and trust.contradictions(peer) == []


def test_a_wrong_binary_vjp_value_where_the_nan_clause_governs_stays_a_failure():
    from conformance.lowp.binary_vjp import sweep_vjp
    kernel = fx.BUGGY_BINARY_VJP[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rec = sweep_vjp(kernel, "cpu", ROWS, seed=1, contract=lowp_contract_for(PEER, "max"))
    # NaN where PyTorch gives g: failures (a NaN cotangent, where both are NaN, is explained)
    assert rec["failure_reasons"] == {"vjp-nan-mismatch": rec["failed"]} and rec["failed"] > 1000

