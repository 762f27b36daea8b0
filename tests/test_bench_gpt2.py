"""benchmarks/bench_gpt2.py, the parts that need no GPU: its arguments, the ratios and goal
verdicts, the table and JSON written from a made-up result, the named exit when CUDA or torch is
missing; and the allocator's peak reset it measures our side with."""
from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from benchmarks import bench_gpt2 as bg
from benchmarks.timing import emit
from engine.runtime.allocator import ExactSizeCache


def test_defaults_and_quick():
    args = bg.parse_args([])
    assert (args.presets, args.steps, args.compile) == (["small", "gpt2-124m"], 20, True)
    assert (args.profile, args.graph, args.graph_profile) == ("checked_cuda", False, "graph_cuda")
    quick = bg.parse_args(["--quick"])
    assert (quick.steps, quick.compile) == (6, False)       # compile only when asked
    assert bg.parse_args(["--quick", "--compile"]).compile is True
    assert bg.parse_args(["--no-compile"]).compile is False
    args = bg.parse_args(["--presets", " gpt2-124m,", "--steps", "3", "--graph",
                          "--profile", "graph_cuda", "--json", "r.json", "--table", "r.txt"])
    assert (args.presets, args.steps, args.graph, args.profile) == (["gpt2-124m"], 3, True,
                                                                    "graph_cuda")
    assert (args.json, args.table) == ("r.json", "r.txt")


@pytest.mark.parametrize("argv, says", [
    (["--presets", "huge"], "no gpt2 preset named 'huge'; choose among tiny, small, gpt2-124m"),
    (["--presets", ","], "--presets is empty"),
    (["--steps", "0"], "--steps must be at least 1 timed step, got 0"),
    (["--profile", "nope"], "--profile nope: no profile named `nope`; known profiles:"),
    (["--graph-profile", "checked_cpu"], "--graph-profile checked_cpu: targets cpu, not cuda; "
                                         "pick one of checked_cuda"),
    (["--compile", "--no-compile"], "not allowed with argument"),
])
def test_bad_arguments_exit_with_the_reason(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        bg.parse_args(argv)
    assert exc.value.code == 2
    assert says in capsys.readouterr().err


def test_steps_split_into_loops():
    assert bg._loops(6, quick=True) == (2, 3)
    assert bg._loops(20, quick=False) == (4, 5)
    assert bg._loops(1, quick=False) == (1, 1)


def _side(ms, peak_mib, losses=(5.5, 5.4, 5.3), **extra):
    return bg._side(ms, 8192, peak_mib * bg.MIB, list(losses), **extra)


def _payload(ours_ms=110.0, ours_peak=7000):
    big = {"preset": "gpt2-124m", "batch": 8, "seq_len": 1024, "sides": {
        "ours eager": _side(ours_ms, ours_peak, profile="checked_cuda",
                            attention="native_cuda.flash_attention"),
        "ours graph": {"error": "GraphCaptureError: the step read back to the host"},
        "torch eager": _side(100.0, 6400.0),
        "torch compile": _side(97.0, 6000.0, compile_s=61.25)}}
    small = {"preset": "small", "batch": 16, "seq_len": 256, "sides": {
        "ours eager": _side(20.0, 300.0), "torch eager": _side(10.0, 200.0),
        "torch compile": {"skipped": "--no-compile"}}}
    attention = {"shape": {"batch": 8, "heads": 12, "tokens": 1024, "head_dim": 64,
                           "causal": True},
                 "sdpa_efficient": {"forward_ms": 1.0, "both_ms": 4.0, "forward_err": 2e-7,
                                    "grad_err": 3e-7},
                 "capsules": [{"capsule": "native_cuda.direct_attention", "forward_ms": 1.1,
                               "both_ms": 5.2, "forward_ratio": 1.1, "both_ratio": 1.3,
                               "forward_err": 1e-7, "grad_err": 2e-7},
                              {"capsule": "native_cuda.flash_attention",
                               "skipped": "head dim 64 only"},
                              {"capsule": "torchlean.composed_attention",
                               "error": "OutOfMemoryError: 400 MiB"}]}
    return {"device": "NVIDIA H200", "torch": "2.11.0", "attention": attention,
            "presets": [bg.add_ratios(small), bg.add_ratios(big)]}


def test_ratios_and_goals_against_torch_eager():
    payload = _payload()
    small, big = payload["presets"]
    ours = big["sides"]["ours eager"]
    assert ours["time_ratio"] == pytest.approx(1.1)
    assert ours["peak_ratio"] == pytest.approx(7000 / 6400)
    assert ours["tokens_per_s"] == pytest.approx(8192 / 0.110)
    assert ours["goal"] == {"time": False, "time_beyond": False, "peak": True}
    assert big["sides"]["torch compile"]["time_ratio"] == pytest.approx(0.97)
    assert "goal" not in big["sides"]["torch compile"]      # a peer has no goal
    assert "goal" not in small["sides"]["ours eager"]       # the goals are gpt2-124m's
    assert "time_ratio" not in big["sides"]["ours graph"]   # a failed side has no numbers
    met = bg.add_ratios(_payload(89.0, 7040)["presets"][1])["sides"]["ours eager"]["goal"]
    assert met == {"time": True, "time_beyond": True, "peak": True}
    over = _payload(100.0, 7041)["presets"][1]["sides"]["ours eager"]["goal"]
    assert over == {"time": True, "time_beyond": False, "peak": False}    # 7041 > 1.1 * 6400


def test_table_rows():
    text = bg.table(_payload())
    assert text.startswith("gpt2 training step on NVIDIA H200; torch 2.11.0")
    assert ("gpt2-124m  ours eager        110.00     74,473     7000.0       1.100       1.094  "
            "time <= 1.0: NOT MET (<= 0.9: NOT MET); peak <= 1.1: met") in text
    assert ("gpt2-124m  torch compile      97.00     84,454     6000.0       0.970       0.938  "
            "(compile: first step 61.2 s)") in text
    assert "gpt2-124m  ours graph     FAILED: GraphCaptureError: the step read back" in text
    assert "small      torch compile  skipped: --no-compile" in text
    assert "small      ours eager         20.00    409,600      300.0       2.000       1.500  -" \
        in text
    assert ("gpt2-124m  ours eager     losses 5.50000 5.40000 5.30000  profile=checked_cuda  "
            "attention=native_cuda.flash_attention") in text
    assert bg.PEAK_NOTE in text
    assert ("native_cuda.direct_attention        1.100   1.10      5.200   1.30  1.0e-07  "
            "2.0e-07  NOT MET") in text
    assert "native_cuda.flash_attention      skipped: head dim 64 only" in text
    assert "torchlean.composed_attention     FAILED: OutOfMemoryError: 400 MiB" in text
    failed = dict(_payload(), attention={"error": "RuntimeError: no efficient backend"})
    assert bg.table(failed).endswith("\n\nattention kernels: FAILED: RuntimeError: no "
                                     "efficient backend")


def test_json_and_table_files(tmp_path, capsys):
    payload = _payload()
    args = bg.parse_args(["--json", str(tmp_path / "r.json"), "--table", str(tmp_path / "r.txt")])
    emit(args, bg.table(payload), payload)
    written = json.loads((tmp_path / "r.json").read_text())
    assert written["presets"][1]["sides"]["ours eager"]["goal"]["peak"] is True
    assert written["attention"]["capsules"][1]["skipped"] == "head dim 64 only"
    assert (tmp_path / "r.txt").read_text() == bg.table(payload) + "\n"
    assert capsys.readouterr().out == bg.table(payload) + "\n"


def test_no_cuda_exits_2_naming_what_to_do(monkeypatch, capsys):
    from engine.errors import NativeRuntimeUnavailable

    def no_runtime():
        raise NativeRuntimeUnavailable("CUDA requested, but this is the CPU parity stub")
    monkeypatch.setattr("engine.runtime.native.require_native_runtime", no_runtime)
    assert bg.main(["--quick"]) == 2
    assert capsys.readouterr().err == ("bench_gpt2: our side needs the native CUDA runtime: CUDA "
                                       "requested, but this is the CPU parity stub\n")


def test_no_torch_or_a_cpu_only_torch_is_named(monkeypatch):
    monkeypatch.setattr("engine.runtime.native.require_native_runtime", lambda: None)
    monkeypatch.setitem(sys.modules, "torch", None)      # import torch raises ImportError
    with pytest.raises(bg.BenchUnavailable, match=r"the PyTorch peer needs torch, which is not "
                                                  r"importable .*; install a CUDA build"):
        bg.require_gpu()
    cpu_only = types.SimpleNamespace(__version__="2.11.0+cpu",
                                     cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", cpu_only)
    with pytest.raises(bg.BenchUnavailable, match=r"torch 2.11.0\+cpu sees no CUDA device \(a "
                                                  r"CPU-only build, or no GPU here\)"):
        bg.require_gpu()


class _Runtime:
    """cudaMalloc and cudaFree as counters (ExactSizeCache takes the runtime as an argument)."""
    class CUDARuntimeError(Exception):
        status = 2

    def __init__(self):
        self.next = 0

    def malloc(self, size):
        self.next += 0x1000
        return self.next

    def free(self, ptr):
        pass

    def deviceSynchronize(self):
        pass


def test_reset_peak_starts_from_the_live_bytes():
    cache = ExactSizeCache(0, runtime=_Runtime())
    a, b = cache.malloc(1000, 0), cache.malloc(500, 0)
    cache.free(b, 0)
    assert (cache.live_bytes, cache.peak_bytes) == (1000, 1500)
    cache.reset_peak()
    assert cache.peak_bytes == 1000
    c = cache.malloc(200, 0)
    assert cache.peak_bytes == 1200
    cache.free(a, 0)
    cache.free(c, 0)
    assert (cache.live_bytes, cache.peak_bytes) == (0, 1200)


def _fake_torch(calls):
    return types.SimpleNamespace(
        __version__="2.11.0",
        cuda=types.SimpleNamespace(get_device_name=lambda: "NVIDIA H200",
                                   empty_cache=lambda: calls.append("empty_cache")),
        _dynamo=types.SimpleNamespace(reset=lambda: calls.append("dynamo reset")))


def test_a_failing_side_is_reported_and_the_others_run(monkeypatch):
    calls = []
    monkeypatch.setattr(bg, "make_batches", lambda t, b, n: [(None, None)] * n)
    monkeypatch.setattr(bg, "free_ours", lambda: calls.append("free ours"))

    def ours(cp, config, batches, profile, graph, steps, quick, init=None, split_with=None):
        if graph:
            raise RuntimeError("capture refused")
        assert split_with is torch                         # the eager side's split (default)
        init.update(params={"wte": 1}, decays=[True])
        return _side(10.0, 100.0)

    def peer(torch, cp, config, batches, params, decays, steps, quick, compiled, split=False):
        assert (params, decays) == ({"wte": 1}, [True])   # ours' initial parameters
        assert split is not compiled                       # torch eager's split only
        if compiled:
            raise RuntimeError("inductor failed")
        return _side(5.0, 50.0)
    monkeypatch.setattr(bg, "bench_ours", ours)
    monkeypatch.setattr(bg, "bench_torch", peer)
    args = bg.parse_args(["--presets", "small", "--graph", "--compile"])
    torch = _fake_torch(calls)
    r = bg.bench_preset(None, torch, "small", args)
    assert list(r["sides"]) == ["ours eager", "ours graph", "torch eager", "torch compile"]
    assert r["sides"]["ours graph"] == {"error": "RuntimeError: capture refused"}
    assert r["sides"]["torch compile"] == {"error": "RuntimeError: inductor failed"}
    assert r["sides"]["torch eager"]["ms"] == 5.0
    assert calls == ["free ours", "empty_cache", "free ours", "dynamo reset", "empty_cache"]
    assert (r["batch"], r["seq_len"], r["tokens_per_step"]) == (16, 256, 4096)

    def broken(*a, **k):
        raise RuntimeError("out of memory")
    monkeypatch.setattr(bg, "bench_ours", broken)
    r = bg.bench_preset(None, _fake_torch(calls), "small", bg.parse_args(["--quick"]))
    # no initial parameters: no peer is timed, and compile is marked skipped (--quick)
    assert r["sides"] == {"ours eager": {"error": "RuntimeError: out of memory"},
                          "torch compile": {"skipped": "--quick (pass --compile to time it)"}}


def test_main_writes_what_was_measured_when_stopped(monkeypatch, tmp_path, capsys):
    calls = []
    monkeypatch.setattr(bg, "require_gpu", lambda: (None, _fake_torch(calls)))
    small = _payload()["presets"][0]

    def preset(cp, torch, name, args):
        if name == "gpt2-124m":
            raise KeyboardInterrupt   # what SIGTERM from a time limit becomes
        return dict(small, sides={k: dict(v) for k, v in small["sides"].items()})
    monkeypatch.setattr(bg, "bench_preset", preset)
    monkeypatch.setattr(bg.attention_capsules, "bench",
                        lambda cp, torch, quick: _payload()["attention"])
    out = tmp_path / "r.json"
    assert bg.main(["--quick", "--json", str(out)]) == 130
    written = json.loads(out.read_text())
    assert written["interrupted"] == ("interrupted after 1 preset(s), before the attention "
                                      "kernels")
    assert [p["preset"] for p in written["presets"]] == ["small"]
    assert (written["device"], written["steps"], written["profile"]) == ("NVIDIA H200", 6,
                                                                          "checked_cuda")
    assert capsys.readouterr().out.rstrip().endswith("before the attention kernels")
    assert bg.main(["--quick", "--presets", "small", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["interrupted"] is None
    assert written["attention"]["capsules"][0]["capsule"] == "native_cuda.direct_attention"


def test_torch_side_names_and_decay_groups_follow_our_gpt():
    """benchmarks/torch_gpt.py maps its parameters to our names (what load_engine_parameters
    copies by) and splits fused AdamW's groups by our decay mask: both must follow gpt2.py."""
    from benchmarks import torch_gpt
    from engine.models import gpt2
    ours = gpt2.GPT(gpt2.preset("tiny"), 0)
    leaf = lambda: types.SimpleNamespace(weight=object(), bias=object())   # noqa: E731
    block = lambda: types.SimpleNamespace(ln_1=leaf(), ln_2=leaf(), q=leaf(), k=leaf(),  # noqa
                                          v=leaf(), o=leaf(), fc=leaf(), proj=leaf())
    theirs = types.SimpleNamespace(wte=leaf(), wpe=leaf(), ln_f=leaf(),
                                   blocks=[block() for _ in ours.blocks])
    named = torch_gpt.engine_named(theirs)
    assert [n for n, _ in named] == [n for n, _ in ours.named_parameters()]
    groups = {}
    fake_torch = types.SimpleNamespace(optim=types.SimpleNamespace(
        AdamW=lambda g, **kw: groups.update(groups=g, **kw)))
    torch_gpt.adamw_like_engine(fake_torch, theirs, ours.decays(), lr=1e-3, weight_decay=0.01)
    decayed = {id(p) for n, p in named if n.startswith("h.") and ".ln_" not in n
               and n.endswith("weight")}
    assert [g["weight_decay"] for g in groups["groups"]] == [0.01, 0.0]
    assert {id(p) for p in groups["groups"][0]["params"]} == decayed
    assert len(groups["groups"][1]["params"]) == len(named) - len(decayed)
    assert (groups["fused"], groups["capturable"], groups["lr"]) == (True, False, 1e-3)
    with pytest.raises(ValueError, match="2 decay flags for 28 parameters: pass GPT.decays"):
        torch_gpt.adamw_like_engine(fake_torch, theirs, [True, False])


class _Event:
    """A CUDA event read from the host clock (the CPU session has no stream)."""
    def record(self):
        import time
        self.t = time.perf_counter()

    def synchronize(self):
        pass


def test_our_side_trains_and_hands_torch_its_start(monkeypatch):
    """bench_ours on the CPU profile (tiny preset, host-clock events, a stand-in cache): the
    losses start at a uniform guess and fall, and `init` holds the initial parameters and decay
    mask the torch side starts from."""
    import numpy as np
    from engine.models import gpt2
    cache = types.SimpleNamespace(peak_bytes=999, reset_peak=lambda: None)
    monkeypatch.setattr("engine.runtime.allocator.install", lambda: cache)
    monkeypatch.setattr("engine.runtime.allocator.installed", lambda: None)
    cp = types.SimpleNamespace(
        asnumpy=np.array, cuda=types.SimpleNamespace(
            Event=_Event, get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3,
            Device=lambda: types.SimpleNamespace(synchronize=lambda: None)))
    # this file's bytes stand in for the standard library's (reading that takes seconds)
    monkeypatch.setattr(bg, "_corpus_text", lambda: (Path(__file__).read_bytes() * 3, "test"))
    config = gpt2.preset("tiny")
    batches = bg.make_batches(config.seq_len, config.batch_size, bg.LOSS_STEPS + 2)
    assert batches[0][0].dtype == np.int64 and batches[0][0].shape == (8, 32)
    assert np.array_equal(batches[0][0][:, 1:], batches[0][1][:, :-1])   # next-byte targets
    init = {}
    first = bg.bench_ours(cp, config, batches, "checked_cpu", False, 1, True, init)
    losses = first["losses"]
    assert len(losses) == bg.LOSS_STEPS
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert abs(losses[0] - np.log(256)) < 0.05      # a fresh model guesses bytes uniformly
    assert (first["peak_bytes"], first["profile"]) == (999, "checked_cpu")
    assert first["attention"] == "reference.attention_heads"
    assert first["tokens_per_s"] == pytest.approx(8 * 32 / (first["ms"] / 1e3))
    model = gpt2.GPT(config, bg.SEED)
    assert list(init["params"]) == [n for n, _ in model.named_parameters()]
    q = dict(model.named_parameters())["h.1.attn.q.weight"]
    assert np.array_equal(init["params"]["h.1.attn.q.weight"], q.numpy().reshape(-1))
    assert init["decays"] == model.decays()
