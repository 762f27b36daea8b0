"""The gpt2 example on the CPU: the tiny preset learns a small fixed corpus, a seed fixes every loss
bit for bit, saved parameters load back exactly and every mismatch names itself, sampling repeats
from its seed, --require-evidence refuses without fresh evidence, and every bad argument is a
named one-line error with exit code 2."""
import json
import re

import numpy as np
import pytest

from engine.cli import main
from engine.models import gpt2, gpt2_data, gpt2_sample, gpt2_train
from engine.session import Session, use_session

LINES = (b"def add(a, b):\n    return a + b\n\n", b"class Point:\n    x = 0\n    y = 1\n\n",
         b"for i in range(10):\n    print(i)\n\n")
TEXT = b"".join(LINES[i % 3] for i in range(400))     # 13466 bytes, the same every run
TINY = gpt2.preset("tiny")


def _run(steps, seed=2026, lr=1e-2, log_every=1, **kw):
    corpus = gpt2_data.Corpus(TEXT, 32)
    t = gpt2_train.TrainSettings(steps=steps, lr=lr, batch_size=8, seq_len=32, seed=seed,
                                 log_every=log_every, **{k: v for k, v in kw.items()
                                                         if k in ("load_params", "save_params")})
    return gpt2_train.run(Session("cpu"), TINY, corpus, t, prompt=b"def ",
                          generate=kw.get("generate", 0))


@pytest.fixture(scope="module")
def trained():
    return _run(150, log_every=25)


def test_tiny_loss_falls_by_half(trained):
    first, last = trained.losses[0][1], trained.losses[-1][1]
    # ln 256 = 5.545 at the start: every byte equally likely under the near-zero initial head.
    assert abs(first - np.log(256)) < 0.05, first
    assert last <= 0.5 * first, trained.losses
    assert trained.held_out[-1][1] <= 0.5 * trained.held_out[0][1], trained.held_out


def test_same_seed_same_losses_bit_for_bit():
    a, b, c = _run(4), _run(4), _run(4, seed=7)
    assert a.losses == b.losses and a.held_out == b.held_out
    assert [v for _, v in a.losses] != [v for _, v in c.losses]


def test_ops_list_is_what_a_step_and_a_sample_dispatch():
    session = Session("cpu")
    with use_session(session):
        model = gpt2.GPT(TINY, 3)
        x, y = gpt2_data.Corpus(TEXT, 16).held_out(2)
        model.loss(x, y).backward()
        gpt2_sample.generate(model, b"a", 2, gpt2_sample.SampleSettings())
    assert set(session.dispatched) == set(gpt2.OPS)
    assert len(gpt2.OPS) == len(set(gpt2.OPS))


def test_parameter_names_shapes_and_decay_mask():
    with use_session(Session("cpu")):
        model = gpt2.GPT(TINY, 3)
    named = dict(model.named_parameters())
    assert named["wte"].shape == (256, 32) and named["wpe"].shape == (64, 32)
    assert named["h.1.mlp.fc.weight"].shape == (128, 32)
    assert len(named) == 2 + 12 * TINY.layers + 2
    decays = dict(zip(named, model.decays()))
    assert decays["h.0.attn.q.weight"] and not decays["wte"] and not decays["h.0.ln_1.weight"]
    assert not decays["h.0.mlp.fc.bias"]
    assert gpt2.parameter_count(model) == 35456


def test_presets_have_the_issue_shapes():
    big = gpt2.preset("gpt2-124m")
    assert (big.layers, big.width, big.heads, big.context) == (12, 768, 12, 1024)
    small = gpt2.preset("small")
    assert (small.layers, small.width, small.batch_size, small.seq_len) == (4, 256, 16, 256)
    with pytest.raises(gpt2.GPTConfigError, match="no preset named 'huge'; choose one of tiny"):
        gpt2.preset("huge")


def test_save_then_load_gives_identical_losses_and_samples(tmp_path):
    from engine.params_file import load_params
    path = tmp_path / "p.safetensors"
    a = _run(3, save_params=str(path), generate=12)
    assert path.is_file() and not list(tmp_path.glob(".p.safetensors.*"))   # temp file renamed
    # Another seed initialises other parameters; loading replaces every one of them.
    b = _run(0, seed=99, load_params=str(path), generate=12)
    assert b.sample == a.sample and len(a.sample) == 12
    with use_session(Session("cpu")):
        model = gpt2.GPT(TINY, 99)
        load_params(path, model.named_parameters())
        x, y = gpt2_data.Corpus(TEXT, 32).held_out(8)
        # the held-out loss the run logged after its last update, bit for bit
        assert model.loss(x, y).item() == a.held_out[-1][1]


def _save(tmp_path, config, name="p.safetensors"):
    from engine.params_file import save_params
    with use_session(Session("cpu")):
        save_params(tmp_path / name, gpt2.GPT(config, 1).named_parameters())
    return tmp_path / name


@pytest.mark.parametrize("config, message", [
    (gpt2.GPTConfig(1, 32, 2, 64, 8, 32), "parameter `h.1.ln_1.weight` is missing from the file"),
    (gpt2.GPTConfig(3, 32, 2, 64, 8, 32), "the file holds `h.2.attn.k.weight`, which the model"),
    (gpt2.GPTConfig(2, 32, 2, 128, 8, 32), r"parameter `wpe` has shape \(128, 32\) in the file, "
                                           r"the model wants \(64, 32\)"),
], ids=["missing", "extra", "shape"])
def test_each_mismatch_names_itself(tmp_path, config, message):
    from engine.params_file import ParamsMismatchError, load_params
    path = _save(tmp_path, config)
    with use_session(Session("cpu")):
        model = gpt2.GPT(TINY, 4)
        before = model.wte.weight.numpy()
        with pytest.raises(ParamsMismatchError, match=message):
            load_params(path, model.named_parameters())
        assert np.array_equal(model.wte.weight.numpy(), before)   # nothing changed


def test_dtype_mismatch_and_unreadable_files_are_named(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    from engine.params_file import ParamsFileError, ParamsMismatchError, load_params
    with use_session(Session("cpu")):
        model = gpt2.GPT(TINY, 4)
    arrays = {n: p.numpy() for n, p in model.named_parameters()}
    arrays["ln_f.bias"] = arrays["ln_f.bias"].astype(np.float64)
    st.save_file(arrays, str(tmp_path / "f64.safetensors"))
    with pytest.raises(ParamsMismatchError, match="`ln_f.bias` has dtype float64 in the file"):
        load_params(tmp_path / "f64.safetensors", model.named_parameters())
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ParamsFileError, match="is not a readable safetensors file"):
        load_params(tmp_path / "junk.safetensors", model.named_parameters())
    with pytest.raises(ParamsFileError, match="no such file"):
        load_params(tmp_path / "absent.safetensors", model.named_parameters())


def test_sampling_repeats_from_its_seed():
    with use_session(Session("cpu")):
        model = gpt2.GPT(TINY, 3)
        s0 = gpt2_sample.SampleSettings(seed=0)
        a = gpt2_sample.generate(model, b"def ", 16, s0)
        b = gpt2_sample.generate(model, b"def ", 16, s0)
        c = gpt2_sample.generate(model, b"def ", 16, gpt2_sample.SampleSettings(seed=1))
    assert a == b and len(a) == 16 and a != c
    assert gpt2_sample.decode(b"ok\xff") == "ok\ufffd"


def test_next_byte_rules():
    rng = np.random.default_rng(0)
    logits = np.zeros(256)
    logits[[65, 66]] = [5.0, 4.0]
    greedy = gpt2_sample.SampleSettings(top_k=1, repeat_penalty=1.0)
    assert gpt2_sample.next_byte(logits, np.array([65]), greedy, rng) == 65
    # 65 was just seen: 5 / 2 = 2.5 < 4, so greedy picks 66; outside the window it would not.
    pen = gpt2_sample.SampleSettings(top_k=1, repeat_penalty=2.0, repeat_window=2)
    assert gpt2_sample.next_byte(logits, np.array([65, 1]), pen, rng) == 66
    assert gpt2_sample.next_byte(logits, np.array([65, 1, 2]), pen, rng) == 65
    # top-k 2 at a low temperature: only 65 and 66 are ever drawn.
    two = gpt2_sample.SampleSettings(top_k=2, temperature=0.5, repeat_penalty=1.0)
    assert {gpt2_sample.next_byte(logits, np.array([]), two, rng) for _ in range(50)} == {65, 66}


def test_corpus_split_windows_and_errors(tmp_path):
    c = gpt2_data.Corpus(TEXT, 32)
    assert len(c.held) == int(len(TEXT) * 0.05) and len(c.train) + len(c.held) == len(TEXT)
    x, y = c.batch(np.random.default_rng(0), 4)
    assert x.shape == y.shape == (4, 32) and np.array_equal(x[:, 1:], y[:, :-1])
    hx, _ = c.held_out(3)
    assert np.array_equal(hx, c.held_out(3)[0])
    with pytest.raises(gpt2_data.CorpusError, match="has 100 bytes; --seq-len 32 needs at least"):
        gpt2_data.Corpus(b"x" * 100, 32)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(gpt2_data.CorpusError, match="is empty"):
        gpt2_data.read_corpus(str(tmp_path / "empty.txt"))
    with pytest.raises(gpt2_data.CorpusError, match="no such file"):
        gpt2_data.read_corpus(str(tmp_path / "absent.txt"))


def test_default_corpus_is_the_stdlib_in_sorted_order():
    files = gpt2_data.stdlib_sources()
    assert files == sorted(files) and any(f.name == "os.py" for f in files)
    assert not any("site-packages" in f.parts for f in files)


def test_unigram_entropy():
    assert gpt2_data.unigram_entropy(np.frombuffer(b"abab", np.uint8)) == pytest.approx(np.log(2))


def _cli(capsys, *argv):
    code = main(["gpt2", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(TEXT)
    return str(path)


def test_cli_trains_saves_loads_and_logs(tmp_path, corpus_file, capsys):
    log, params = tmp_path / "run.json", tmp_path / "p.safetensors"
    code, out, err = _cli(capsys, "--data-file", corpus_file, "--steps", "2", "--log-every", "1",
                          "--generate", "8", "--save-params", str(params), "--log", str(log))
    assert code == 0, err
    assert "preset=tiny layers=2 width=32 heads=2 context=64 batch=8 seq_len=32" in out
    assert "step     1  loss" in out and "saved parameters to" in out and "sample (seed 0):" in out
    doc = json.loads(log.read_text())
    assert doc["preset"] == "tiny" and len(doc["losses"]) == 2 and len(doc["held_out"]) == 2
    code, out2, err = _cli(capsys, "--data-file", corpus_file, "--steps", "1", "--generate", "8",
                           "--load-params", str(params), "--seed", "5")
    assert code == 0 and "loaded parameters from" in out2, err


@pytest.mark.parametrize("argv, message", [
    (["--preset", "huge"], "no preset named 'huge'"),
    (["--seq-len", "65"], r"--seq-len 65 must be in \[1, 64\]"),
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--lr", "0"], "--lr must be a positive finite number, got 0.0"),
    (["--temperature", "0"], "--temperature must be a positive finite number, got 0.0"),
    (["--top-k", "0"], "--top-k must be at least 1, got 0"),
    (["--repeat-penalty", "0.5"], "--repeat-penalty must be a finite number >= 1"),
    (["--steps", "-1"], "--steps must be 0 or more, got -1"),
    (["--data-file", "/nonexistent/corpus.txt"], "--data-file /nonexistent/corpus.txt: no such"),
    (["--load-params", "/nonexistent/p.safetensors"], "--load-params /nonexistent/p.safetensors"),
    (["--save-params", "/nonexistent/dir/p.safetensors"], "pass a file path in an existing"),
])
def test_cli_bad_arguments_exit_2_with_one_line(capsys, argv, message):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.startswith("torchlean: error: ") and err.count("\n") == 1
    assert re.search(message, err), err


def test_cli_short_and_empty_files_and_mismatched_params(tmp_path, capsys, corpus_file):
    short = tmp_path / "short.txt"
    short.write_bytes(b"x" * 200)
    code, _, err = _cli(capsys, "--data-file", str(short))
    assert code == 2 and "has 200 bytes; --seq-len 32 needs at least" in err
    params = _save(tmp_path, gpt2.GPTConfig(2, 32, 2, 128, 8, 32))
    code, _, err = _cli(capsys, "--data-file", corpus_file, "--load-params", str(params))
    assert code == 2 and "parameter `wpe` has shape (128, 32) in the file" in err


def _trust(tmp_path, earned):
    caps = {f"reference.{op.label}": {"earned": earned.get(op.label, "checked")}
            for op in gpt2.OPS}
    path = tmp_path / "trust.json"
    path.write_text(json.dumps({"format": "torchlean-conformance-trust", "capsules": caps}))
    return str(path)


def test_require_evidence_refuses_naming_the_capsules(tmp_path, corpus_file, capsys):
    args = ["--data-file", corpus_file, "--steps", "1", "--generate", "0", "--require-evidence"]
    code, out, err = _cli(capsys, *args, "--trust", str(tmp_path / "absent.json"))
    assert code == 2 and out == "" and "(no such file)" in err
    assert "reference.attention_heads [evidence]: claims `checked` but has earned " \
           "nothing" in err and "reference.gather [evidence]" in err
    code, out, err = _cli(capsys, *args, "--trust", _trust(tmp_path, {"layer_norm": "fuzzed"}))
    assert code == 2 and "reference.layer_norm [evidence]: claims `checked`, earned `fuzzed`" in err
    assert "reference.gather [evidence]" not in err
    code, out, err = _cli(capsys, *args, "--trust", _trust(tmp_path, {}))
    assert code == 0 and "evidence: every capsule of the plan has fresh evidence" in out, err


def test_memory_watch_warns_when_free_memory_keeps_falling(monkeypatch, capsys):
    from engine.cli_memory import MemoryWatch
    from engine.runtime import allocator
    free = iter([100, 90, 95, 80, 70, 60])

    class Stats:
        def __init__(self):
            self.mem_free = next(free)

        def format(self):
            return f"mem_free={self.mem_free}"
    monkeypatch.setattr(allocator, "allocator_stats", Stats)
    watch = MemoryWatch(2)
    for step in range(12):
        watch(step)
    out = capsys.readouterr()
    assert out.out.count("memory at step") == 6 and "memory at step 1: mem_free=100" in out.out
    # 95 -> 80 -> 70 -> 60 falls three times running; 100 -> 90 -> 95 did not.
    assert out.err.count("warning: free device memory fell") == 1
    assert "95 -> 80 -> 70 -> 60 bytes" in out.err
