"""The gpt2 example's tiny preset on CUDA: its first losses agree with the CPU run's within the
bounds declared below, a seed repeats bit for bit in deterministic mode, parameters saved on one
device load on the other, and --cuda-mem-watch prints the device allocator's stats."""
import pytest

from engine.cli import main
from engine.models import gpt2, gpt2_data, gpt2_train
from engine.session import Session
from test_gpt2 import TEXT

pytestmark = pytest.mark.cuda

TINY = gpt2.preset("tiny")
STEPS = 5


def _run(device, **kw):
    t = gpt2_train.TrainSettings(steps=STEPS, lr=1e-3, batch_size=8, seq_len=32, log_every=1,
                                 **kw)
    return gpt2_train.run(Session(device), TINY, gpt2_data.Corpus(TEXT, 32), t)


@pytest.fixture(scope="module")
def cpu_run():
    return _run("cpu")


def test_first_losses_agree_with_the_cpu_and_repeat_bitwise(cpu_run):
    from engine.runtime.deterministic import deterministic_reductions
    with deterministic_reductions():
        a, b = _run("cuda"), _run("cuda")
    assert a.losses == b.losses and a.held_out == b.held_out
    cpu = [v for _, v in cpu_run.losses]
    got = [v for _, v in a.losses]
    # Declared bounds. Step 0 is one forward pass of the same parameters whose sums run in other
    # orders (reference: float64 accumulation rounded once; CUDA: float32 kernels and cuBLAS
    # without TF32): a few float32 ulps through two blocks, far under 1e-5 relative and far
    # under any indexing or masking error (those move the loss by 1e-2 or more).
    assert abs(got[0] - cpu[0]) <= 1e-5 * cpu[0], (got[0], cpu[0])
    # Steps 1-4 follow AdamW updates. Adam's first steps are nearly sign(g) * lr, so only elements
    # whose gradient is within its rounding error of zero can move apart (by up to 2 lr), and
    # those barely touch the loss (their gradient is that small): the losses stay within
    # 1e-3 absolute (2e-4 relative at ln 256), still far below one wrong gradient's effect.
    for step in range(1, STEPS):
        assert abs(got[step] - cpu[step]) <= 1e-3, (step, got[step], cpu[step])
    assert abs(a.held_out[-1][1] - cpu_run.held_out[-1][1]) <= 1e-3


def test_params_saved_on_cuda_load_on_the_cpu(tmp_path):
    from engine.params_file import load_params
    from engine.session import use_session
    path = tmp_path / "p.safetensors"
    a = _run("cuda", save_params=str(path))
    with use_session(Session("cpu")):
        model = gpt2.GPT(TINY, 99)
        load_params(path, model.named_parameters())
        x, y = gpt2_data.Corpus(TEXT, 32).held_out(8)
        held = model.loss(x, y).item()
    # The same parameters, one forward pass on each device: step 0's bound above.
    assert abs(held - a.held_out[-1][1]) <= 1e-5 * held, (held, a.held_out[-1][1])


def test_cli_memory_watch_prints_device_stats(tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(TEXT)
    code = main(["gpt2", "--device", "cuda", "--data-file", str(corpus), "--steps", "4",
                 "--cuda-mem-watch", "2", "--generate", "4", "--show-backend"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.count("memory at step") == 2 and "backend=cuda" in out
    assert "attention_heads: native_cuda.attention_heads" in out   # causal, no permutes
    assert "scaled_dot_product_attention: " not in out and "permute: " not in out
    assert "bias_gelu: native_cuda.bias_gelu" in out and "\ngelu: " not in out   # the fused MLP
    assert "matmul: cublas.matmul" in out
