"""benchmarks/bench_gpt2.py on CUDA at small sizes: at the tiny preset our eager and replayed
steps and PyTorch's eager step start from the same parameters and take the same batches, so their
first losses agree within test_cuda_gpt2.py's declared bounds (a wrong parameter map or decay
mask moves them by 1e-2 or more), and each side's peak holds at least its training state; the
attention section, at a small shape, checks and times every capsule of ours against SDPA."""
import pytest

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip(f"torch {torch.__version__} sees no CUDA device")
    from benchmarks import bench_gpt2 as bg
    return bg.require_gpu()


def test_tiny_preset_sides_start_alike_and_measure(gpu):
    from benchmarks import bench_gpt2 as bg
    from engine.models import gpt2
    from engine.profile import profile_named
    from engine.types import BackendOp, RuntimeEntry
    cp, torch = gpu
    args = bg.parse_args(["--presets", "tiny", "--steps", "2", "--quick", "--graph"])
    r = bg.add_ratios(bg.bench_preset(cp, torch, "tiny", args))
    sides = r["sides"]
    assert not [s for s in sides.values() if "error" in s], sides
    ours, replayed, peer = (sides[k]["losses"] for k in ("ours eager", "ours graph",
                                                         "torch eager"))
    for other in (replayed, peer):
        # Step 0: one forward pass of the same parameters, sums in other orders: a few float32
        # ulps (test_cuda_gpt2.py's bound). Steps 1-2 follow AdamW updates: 1e-3 absolute (its
        # reasoning: Adam's first steps are nearly sign(g) * lr).
        assert abs(other[0] - ours[0]) <= 1e-5 * ours[0], (other, ours)
        assert all(abs(a - b) <= 1e-3 for a, b in zip(other[1:], ours[1:])), (other, ours)
    # the attention capsule the profile plans: attention_heads where it plans one (gpt2 then
    # runs the fused entry), else scaled_dot_product_attention's
    for side, profile in (("ours eager", "checked_cuda"), ("ours graph", "graph_cuda")):
        plan = profile_named(profile).plan([RuntimeEntry.attention_heads,
                                            BackendOp.scaled_dot_product_attention]).selected
        op = next(o for o in (RuntimeEntry.attention_heads, BackendOp.scaled_dot_product_attention)
                  if o in plan)
        assert sides[side]["attention"] == plan[op].name
    # Every side holds parameters, gradients and AdamW's two moments at its peak (float32).
    state = 4 * 4 * gpt2.parameter_count(gpt2.GPT(gpt2.preset("tiny"), 0))
    for name in ("ours eager", "ours graph", "torch eager"):
        side = sides[name]
        assert side["peak_bytes"] >= state, (name, side["peak_bytes"], state)
        assert side["ms"] > 0 and side["tokens_per_s"] == pytest.approx(256e3 / side["ms"])
    assert sides["torch eager"]["time_ratio"] == 1.0
    # the step split of both eager sides (benchmarks/step_split.py): every part seen, the parts
    # adding up to the kernels' total; the replayed side has none
    for name in ("ours eager", "torch eager"):
        split = sides[name]["split"]
        assert "error" not in split, split
        assert min(split["GEMM"], split["attention"], split["the rest"]) > 0, split
        assert split["GEMM"] + split["attention"] + split["the rest"] == \
            pytest.approx(split["kernels_ms"])
    assert "split" not in sides["ours graph"]
    assert sides["torch compile"] == {"skipped": "--quick (pass --compile to time it)"}


def test_attention_section_at_a_small_shape(gpu, monkeypatch):
    from benchmarks import attention_capsules
    from engine.registry import registry
    from engine.types import BackendOp, Device, Provider
    cp, torch = gpu
    monkeypatch.setattr(attention_capsules, "SHAPE", (2, 3, 128, 32))
    result = attention_capsules.bench(cp, torch, quick=True)
    ours = {c.name for c in registry().capsules(BackendOp.scaled_dot_product_attention)
            if c.device is Device.cuda and c.provider in (Provider.native_cuda,
                                                          Provider.torchlean)}
    rows = {r["capsule"]: r for r in result["capsules"]}
    assert set(rows) == ours
    timed = [r for r in rows.values() if "forward_ms" in r]
    assert "torchlean.composed_attention" in {r["capsule"] for r in timed}
    # Bounds from float32 dot products of at most 128 terms (n u = 128 * 2^-24 = 7.6e-6 at
    # worst, whatever the order of the sums): the forward is one such product after the
    # softmax; a gradient chains two (dp = g v^T, then ds k) with a subtraction between,
    # allowed twice 2 n u. A wrong mask, scale or layout errs by 1e-2 or more.
    for r in timed + [result["sdpa_efficient"]]:
        assert r["forward_err"] <= 1e-5 and r["grad_err"] <= 3e-5, r
    for r in timed:
        assert r["forward_ratio"] == pytest.approx(
            r["forward_ms"] / result["sdpa_efficient"]["forward_ms"])
        assert r["both_ms"] > 0
    assert "B2 H3 T128 D32 causal" in attention_capsules.table(result)
