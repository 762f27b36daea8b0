"""Training the gpt2 example: AdamW on random windows of the corpus, the held-out loss on fixed
windows of its last 5% every log interval, parameters loaded before and saved after."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from engine.models import gpt2, gpt2_sample
from engine.models.gpt2_data import Corpus
from engine.optim import AdamW
from engine.session import Session, use_session


@dataclass(frozen=True)
class TrainSettings:
    steps: int = 100
    lr: float = 1e-3
    batch_size: int = 8
    seq_len: int = 32
    seed: int = 2026
    log_every: int = 10
    weight_decay: float = 0.01
    load_params: str | None = None
    save_params: str | None = None
    save_nonfinite: bool = False   # save parameters holding NaN or inf (a diverged run) anyway
    graph: bool = False     # CUDA: step 0 eager and captured, every later step a graph replay


@dataclass
class RunResult:
    losses: list[tuple[int, float]] = field(default_factory=list)        # (step, train loss)
    held_out: list[tuple[int, float]] = field(default_factory=list)      # (step, held-out loss)
    sample: bytes = b""
    parameters: int = 0
    backend_report: str = ""

    @property
    def final_loss(self) -> float:
        return self.losses[-1][1] if self.losses else float("nan")


def run(session: Session, config: gpt2.GPTConfig, corpus: Corpus, t: TrainSettings,
        prompt: bytes = b"", generate: int = 0,
        sampling: gpt2_sample.SampleSettings | None = None,
        on_log: Callable[[str], None] | None = None,
        on_step: Callable[[int], None] | None = None) -> RunResult:
    """Train `t.steps` steps (0 is allowed: load, then sample); `on_log(line)` receives each
    progress line, `on_step(step)` is called after each update (the memory watch)."""
    from engine.params_file import load_params, save_params
    gpt2.check_shape(config, t.batch_size, t.seq_len)
    sampling = (sampling or gpt2_sample.SampleSettings()).check()
    say = on_log or (lambda line: None)
    result = RunResult()
    with use_session(session):
        model = gpt2.GPT(config, t.seed)
        named = model.named_parameters()
        result.parameters = gpt2.parameter_count(model)
        if t.load_params:
            load_params(t.load_params, named)
            say(f"loaded parameters from {t.load_params}")
        opt = AdamW(model.parameters(), lr=t.lr, weight_decay=t.weight_decay,
                    decay=model.decays())
        rng = np.random.default_rng(t.seed)
        train_step = _replayed_step(model, opt, t) if t.graph else None
        try:
            _train(model, opt, corpus, t, rng, train_step, result, say, on_step)
            if t.save_params:
                save_params(t.save_params, named, allow_nonfinite=t.save_nonfinite)
                say(f"saved parameters to {t.save_params}")
            if generate:
                result.sample = gpt2_sample.generate(model, prompt, generate, sampling)
            result.backend_report = session.backend_report() + (
                "\nstep: CUDA graph replay (step 0 eager and captured, later steps replayed)"
                if t.graph else "")
        finally:    # a refused save or a ^C still gives the graph's memory back
            if train_step is not None:
                train_step.close()
    return result


def _train(model, opt, corpus: Corpus, t: TrainSettings, rng, train_step, result: RunResult,
           say, on_step) -> None:
    """`t.steps` updates; the training and held-out losses every `t.log_every` steps and at the
    last into `result`."""
    held_x, held_y = corpus.held_out(t.batch_size)
    if t.steps == 0:   # evaluate only: the held-out loss of the parameters as loaded
        held = model.loss(held_x, held_y).item()
        result.held_out.append((0, held))
        say(f"no training step  held-out {held:.6f}")
    for step in range(t.steps):
        x, y = corpus.batch(rng, t.batch_size)
        if train_step is not None:
            loss = train_step(x, y)
        else:
            opt.zero_grad()
            loss = model.loss(x, y)
            loss.backward()
            opt.step()
        if step % t.log_every == 0 or step == t.steps - 1:
            value = loss.item()
            held = model.loss(held_x, held_y).item()
            result.losses.append((step, value))
            result.held_out.append((step, held))
            say(f"step {step:5d}  loss {value:.6f}  held-out {held:.6f}")
        if on_step is not None:
            on_step(step)


class _replayed_step:
    """The training step as a CUDA graph (engine/graphs.py): the first call runs it eagerly and
    captures it, every later call copies the batch (checked below 256 on the host) into the
    graph's static inputs and replays. The same ops and kernels as the eager step."""

    def __init__(self, model, opt, t: TrainSettings) -> None:
        self.model, self.opt, self.t = model, opt, t
        self.graph = None

    def _step(self, tokens, targets):
        self.opt.zero_grad()
        loss = self.model.loss_on_device(tokens, targets, self.t.batch_size, self.t.seq_len)
        loss.backward()
        self.opt.step()
        return loss

    def __call__(self, x, y):
        if self.graph is None:
            from engine.graphs import capture
            from engine.indices import CheckedIndices
            self.graph = capture(self._step, (CheckedIndices.upload(x, gpt2.VOCAB, "tokens"),
                                              CheckedIndices.upload(y, gpt2.VOCAB, "targets")))
            return self.graph.warmup_outputs
        return self.graph.replay(x, y)

    def close(self) -> None:
        if self.graph is not None:
            self.graph.close()
