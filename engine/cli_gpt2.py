"""`torchlean gpt2`: train the byte-level GPT (engine/models/gpt2.py) and sample from it.
engine/cli.py wires the subcommand and adds the options and the ending every example shares; this
module holds what is gpt2's own (it does not import engine/cli.py: the import graph has no
cycles)."""
from __future__ import annotations

import argparse
import math
import stat
from dataclasses import dataclass
from pathlib import Path

from engine.errors import TorchLeanError


class GPTArgumentError(TorchLeanError, ValueError):
    """A gpt2 option outside its domain."""


def add_arguments(p: argparse.ArgumentParser, seed_type) -> None:
    """gpt2's own options. `seed_type` is the argparse type engine/cli.py gives every seed option
    (passed in: this module does not import engine/cli.py)."""
    from engine.models.gpt2 import PRESETS
    p.add_argument("--preset", default="tiny", help=f"model shape: {', '.join(PRESETS)}")
    p.add_argument("--data-file", default=None,
                   help="train on this file's bytes (default: the standard library's .py "
                        "files)")
    p.add_argument("--lr", type=float, default=0.001, help="AdamW learning rate")
    p.add_argument("--batch-size", type=int, default=None,
                   help="sequences per step (default: the preset's)")
    p.add_argument("--seq-len", type=int, default=None,
                   help="training window in tokens, at most the preset's context "
                        "(default: the preset's)")
    p.add_argument("--log-every", type=int, default=10,
                   help="print the training and held-out loss every K steps")
    p.add_argument("--cuda-mem-watch", type=int, default=0, metavar="N",
                   help="print allocator_stats() every N steps and warn when free device "
                        "memory falls steadily (0: off)")
    p.add_argument("--save-params", default=None, metavar="PATH",
                   help="write the trained parameters as safetensors (atomically; the path is "
                        "checked before training)")
    p.add_argument("--save-nonfinite", action="store_true",
                   help="save parameters holding NaN or inf too (without it a diverged run "
                        "exits 1 and keeps the file already at --save-params)")
    p.add_argument("--load-params", default=None, metavar="PATH",
                   help="start from parameters saved by --save-params")
    p.add_argument("--prompt", default="def ", help="text the sample continues")
    p.add_argument("--generate", type=int, default=200,
                   help="bytes to sample after training (0: none)")
    p.add_argument("--temperature", type=float, default=0.85, help="logits are divided by it")
    p.add_argument("--top-k", type=int, default=12, help="sample among the k likeliest bytes")
    p.add_argument("--repeat-penalty", type=float, default=1.25,
                   help="shrink the logits of recently seen bytes by this factor (1: off)")
    p.add_argument("--repeat-window", type=int, default=24,
                   help="how many recent tokens the penalty looks at")
    p.add_argument("--sample-seed", type=seed_type, default=0,
                   help="seed of the sampling draws, 0 to 2^64-1")
    p.add_argument("--graph", action="store_true",
                   help="CUDA only: run step 0 eagerly, capture it into a CUDA graph and replay "
                        "it for every later step (engine/graphs.py)")
    p.add_argument("--require-evidence", action="store_true",
                   help="refuse to start unless every capsule in the plan has fresh evidence "
                        "for this build (read from --trust)")
    p.add_argument("--trust", default=None, metavar="PATH",
                   help="the trust export for --require-evidence (default: "
                        "reports/evidence/<device>/trust.json)")


def _check(args) -> None:
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise GPTArgumentError(f"--lr must be a positive finite number, got {args.lr}; "
                               "try the default 0.001")
    if args.log_every < 1:
        raise GPTArgumentError(f"--log-every must be at least 1, got {args.log_every}")
    if args.cuda_mem_watch < 0:
        raise GPTArgumentError(f"--cuda-mem-watch must be 0 (off) or a step count, got "
                               f"{args.cuda_mem_watch}")
    if args.generate < 0:
        raise GPTArgumentError(f"--generate must be 0 or more bytes, got {args.generate}")
    if args.graph and args.device != "cuda":
        raise GPTArgumentError(f"--graph replays CUDA graphs and needs --device cuda, got "
                               f"--device {args.device}; drop --graph to train eagerly")
    if args.save_nonfinite and not args.save_params:
        raise GPTArgumentError("--save-nonfinite is given without --save-params; add "
                               "--save-params PATH or drop --save-nonfinite")
    if args.save_params:   # before any step: a save found impossible after training loses it
        from engine.atomic_file import check_writable
        from engine.params_file import safetensors_numpy
        safetensors_numpy()
        check_writable(args.save_params, "--save-params")


def evidence_gate(args, session):
    """`session`, or under --require-evidence a session of its profile with the evidence
    obligation, whose whole plan is accepted here (refusing, naming each capsule) before any
    step."""
    if not args.require_evidence:
        return session
    from engine.earned_trust import check_plan, default_trust_path, evidence_required, \
        read_earned_trust
    from engine.models import gpt2
    from engine.session import Session
    trust = Path(args.trust) if args.trust else default_trust_path(session.device.label)
    session = Session(session.device, evidence_required(session.profile),
                      earned_trust=read_earned_trust(trust))
    check_plan(session, gpt2.ops_for(session.profile), trust)
    print(f"evidence: every capsule of the plan has fresh evidence in {trust}")
    return session


@dataclass(frozen=True)
class Setup:
    config: object          # engine.models.gpt2.GPTConfig
    batch: int
    seq_len: int
    sampling: object        # engine.models.gpt2_sample.SampleSettings


def prepare(args) -> Setup:
    """Every check of the arguments that needs no work: before the session or the corpus."""
    from engine.models import gpt2, gpt2_sample
    config = gpt2.preset(args.preset)
    batch = config.batch_size if args.batch_size is None else args.batch_size
    seq_len = config.seq_len if args.seq_len is None else args.seq_len
    gpt2.check_shape(config, batch, seq_len)
    if args.steps < 0:
        raise GPTArgumentError(f"--steps must be 0 or more, got {args.steps}; 0 evaluates and "
                               "samples the loaded (--load-params) parameters without training")
    _check(args)
    sampling = gpt2_sample.SampleSettings(args.temperature, args.top_k, args.repeat_penalty,
                                          args.repeat_window, args.sample_seed).check()
    if args.data_file is not None:
        check_data_file(args.data_file)
    if args.load_params and not Path(args.load_params).is_file():
        from engine.params_file import ParamsFileError
        raise ParamsFileError(f"--load-params {args.load_params}: no such file; pass a file "
                              "written by --save-params")
    return Setup(config, batch, seq_len, sampling)


_SPECIAL_FILES = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def check_data_file(path: str) -> None:
    """A --data-file that is a regular file with some bytes, else a CorpusError saying what it is
    (the corpus reader said "no such file" of /dev/null, a directory or a pipe)."""
    from engine.models.gpt2_data import CorpusError
    try:
        st = Path(path).stat()
    except FileNotFoundError:
        raise CorpusError(f"--data-file {path}: no such file; pass the path of a text file") \
            from None
    except OSError as exc:
        raise CorpusError(f"--data-file {path} cannot be examined ({exc.strerror or exc}); pass "
                          "the path of a readable text file") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise CorpusError(f"--data-file {path} is a directory; pass the path of a text file "
                          "(for example one of the files in it)")
    if not stat.S_ISREG(mode):
        kind = next((name for is_kind, name in _SPECIAL_FILES if is_kind(mode)), "a special file")
        raise CorpusError(f"--data-file {path} is {kind}, not a regular file; pass the path of "
                          "a text file")
    if st.st_size == 0:
        raise CorpusError(f"--data-file {path} is empty (0 bytes); pass a file with some text")


def train(args, setup: Setup, session):
    """Read the corpus, train, sample, print; (the run's result, what the JSON log adds)."""
    from engine.cli_memory import MemoryWatch
    from engine.models import gpt2_data, gpt2_sample, gpt2_train
    config, batch, seq_len = setup.config, setup.batch, setup.seq_len
    watch = MemoryWatch(args.cuda_mem_watch)
    text, source = gpt2_data.read_corpus(args.data_file)
    corpus = gpt2_data.Corpus(text, seq_len, source)
    entropy = gpt2_data.unigram_entropy(corpus.train)
    print(f"gpt2: device={session.device.label} profile={session.profile.name} "
          f"preset={args.preset} layers={config.layers} width={config.width} "
          f"heads={config.heads} context={config.context} batch={batch} seq_len={seq_len} "
          f"steps={args.steps} lr={args.lr:g} seed={args.seed}"
          + (" graph=replayed" if args.graph else ""))
    print(f"corpus: {len(text)} bytes from {source}; held-out {len(corpus.held)} bytes; byte "
          f"unigram entropy {entropy:.4f} nats")
    settings = gpt2_train.TrainSettings(
        steps=args.steps, lr=args.lr, batch_size=batch, seq_len=seq_len, seed=args.seed,
        log_every=args.log_every, load_params=args.load_params, save_params=args.save_params,
        save_nonfinite=args.save_nonfinite, graph=args.graph)
    # The prompt's bytes as given: surrogateescape undoes the decoding of argv under a non-UTF-8
    # locale (LC_ALL=C PYTHONUTF8=0 turns a non-ASCII byte into a lone surrogate), where a strict
    # encode raised UnicodeEncodeError.
    prompt = args.prompt.encode("utf-8", "surrogateescape")
    result = gpt2_train.run(session, config, corpus, settings, prompt=prompt,
                            generate=args.generate,
                            sampling=setup.sampling, on_log=print, on_step=watch)
    print(f"parameters {result.parameters}")
    if args.steps:
        print(f"final loss {result.final_loss:.6f}  held-out {result.held_out[-1][1]:.6f}")
    else:   # no step, no training loss: the parameters as loaded, unchanged
        print(f"no training step (--steps 0)  held-out {result.held_out[-1][1]:.6f}")
    sample = gpt2_sample.decode(result.sample)
    if args.generate:
        print(f"sample (seed {args.sample_seed}):")
        print(gpt2_sample.decode(prompt + result.sample))
    return result, dict(preset=args.preset, batch_size=batch, seq_len=seq_len, lr=args.lr,
                        parameters=result.parameters, held_out=result.held_out,
                        unigram_entropy=entropy, sample=sample)
