"""gpt2 trained on CUDA against the same run on the CPU: the first steps' losses within a declared
bound of each other, and the CUDA run's loss after `--steps` well below the corpus's byte unigram
entropy (what a model that ignores context reaches). Issue 18's "gpt2 loss on the H200 after 200
steps of `small` is within a derived or declared bound of the CPU run's for the first steps".

    python -m conformance.gpt2_parity --preset small --steps 200 --compare 3

The bound is declared, not derived (a forward error analysis of a whole transformer step, with the
optimizer's feedback, is beyond the per-op rules of the op records, conformance/families/):
  |L_cuda(s) - L_cpu(s)| <= REL_BOUND * |L_cpu(s)| for each compared step s.
Why 1e-4: both sides start from the same parameters and batches, and every op they run is a
capsule whose policy bounds its error to a few float32 ulps (2^-24 relative each) in a different
summation order (cuBLAS vs NumPy's BLAS, our reductions vs NumPy's pairwise sums); step 0 differs
by that rounding alone (measured: below 1e-6 relative), and each AdamW step feeds it back through
the parameters (lr 1e-3 scales an update's difference; the first update's sign(m)/sqrt(v) ratio can
flip where a gradient component is near 0, which moves a parameter by up to lr). Against PyTorch on
the H200 the same model's losses differed by 3e-6 relative at step 2 (benchmarks/bench_gpt2.py).
Training is chaotic over hundreds of steps, so only the first steps are compared; the end of the
run is judged against the entropy: its loss must be below ENTROPY_FRACTION of it.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

REL_BOUND = 1e-4
ENTROPY_FRACTION = 0.75


@dataclass
class Parity:
    preset: str
    compared: list[tuple[int, float, float, float]]   # (step, cpu, cuda, |diff| / |cpu|)
    final_step: int
    final_loss: float
    entropy: float

    @property
    def first_steps_ok(self) -> bool:
        return all(rel <= REL_BOUND for *_, rel in self.compared)

    @property
    def learned(self) -> bool:
        return self.final_loss < ENTROPY_FRACTION * self.entropy

    @property
    def ok(self) -> bool:
        return self.first_steps_ok and self.learned

    def table(self) -> str:
        lines = [f"gpt2 {self.preset}: CUDA vs CPU, same seed, parameters and batches "
                 f"(declared bound: relative {REL_BOUND:g})",
                 f"{'step':>5} {'cpu loss':>12} {'cuda loss':>12} {'rel diff':>10}  verdict"]
        for step, cpu, cuda, rel in self.compared:
            lines.append(f"{step:5d} {cpu:12.6f} {cuda:12.6f} {rel:10.2e}  "
                         f"{'ok' if rel <= REL_BOUND else 'OUT OF BOUND'}")
        lines.append(f"cuda loss at step {self.final_step}: {self.final_loss:.4f} nats; byte "
                     f"unigram entropy {self.entropy:.4f}; ratio "
                     f"{self.final_loss / self.entropy:.3f} (must be < {ENTROPY_FRACTION}): "
                     f"{'ok' if self.learned else 'NOT LEARNED'}")
        return "\n".join(lines)


def _losses(device: str, preset: str, steps: int, profile: str | None) -> list[tuple[int, float]]:
    from engine.models import gpt2, gpt2_data, gpt2_train
    from engine.profile import maintained_for_device, profile_named
    from engine.session import Session
    config = gpt2.preset(preset)
    text, source = gpt2_data.read_corpus(None)
    corpus = gpt2_data.Corpus(text, config.seq_len, source)
    chosen = profile_named(profile) if profile else maintained_for_device(device)
    settings = gpt2_train.TrainSettings(steps=steps, batch_size=config.batch_size,
                                        seq_len=config.seq_len, log_every=1)
    return gpt2_train.run(Session(chosen.device, chosen), config, corpus, settings).losses


def compare(preset: str, steps: int, first: int, cuda_profile: str | None = None) -> Parity:
    from engine.models import gpt2, gpt2_data
    cpu = dict(_losses("cpu", preset, first, None))
    cuda = dict(_losses("cuda", preset, steps, cuda_profile))
    compared = [(s, cpu[s], cuda[s], abs(cuda[s] - cpu[s]) / abs(cpu[s])) for s in sorted(cpu)]
    text, source = gpt2_data.read_corpus(None)
    corpus = gpt2_data.Corpus(text, gpt2.preset(preset).seq_len, source)
    last = max(cuda)
    return Parity(preset, compared, last, cuda[last], gpt2_data.unigram_entropy(corpus.train))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="small")
    p.add_argument("--steps", type=int, default=200, help="CUDA steps (default 200)")
    p.add_argument("--compare", type=int, default=3, help="first steps run on both (default 3)")
    p.add_argument("--profile", default=None, help="the CUDA side's profile (default: cuda's)")
    args = p.parse_args(argv)
    if not 1 <= args.compare <= args.steps:
        p.error(f"--compare {args.compare} must be in [1, --steps {args.steps}]")
    from engine.runtime.native import require_native_runtime
    require_native_runtime()
    result = compare(args.preset, args.steps, args.compare, args.profile)
    print(result.table())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
