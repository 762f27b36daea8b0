"""benchmarks/step_split.py, the parts that need no GPU: which part each kernel name falls in
(names as torch.profiler reports them on the H100 and H200: cuBLAS's, CUTLASS's, PyTorch's
efficient attention, ours), the summed split, its table in bench_gpt2's, and a profiler that fails
leaving the benchmark standing."""
from __future__ import annotations

import types

import pytest

from benchmarks import bench_gpt2 as bg
from benchmarks import step_split as ss


@pytest.mark.parametrize("name, part", [
    ("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4",
     "GEMM"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(Params)", "GEMM"),
    ("void gemvx::kernel<int, int, float, float, float, float, false, true>(Params)", "GEMM"),
    ("void splitKreduce_kernel<32, 16, int, float, float, float, float, true>(Params)", "GEMM"),
    ("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float>)",
     "attention"),
    ("fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel)",
     "attention"),
    ("tl_flash_fwd_64", "attention"), ("tl_flash_dkdv_64", "attention"),
    ("tl_attn_bwd_rows_4", "attention"),
    ("tl_layer_norm_fwd", "the rest"), ("tl_bias_gelu_f32", "the rest"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
     "the rest"),
    ("tl_softmax_f32_w32", "the rest"),
])
def test_each_kernel_falls_in_its_part(name, part):
    assert ss.part_of(name) == part


def test_the_split_sums_every_kernel_once():
    table = {"sm90_xmma_gemm_f32": (80.0, 48), "fmha_cutlassF_f32": (4.0, 12),
             "fmha_cutlassB_f32": (8.0, 12), "tl_layer_norm_fwd": (1.5, 25),
             "tl_adam_multi": (2.25, 1)}
    split = ss.summarize(table)
    assert split == {"GEMM": 80.0, "attention": 12.0, "the rest": 3.75, "kernels_ms": 95.75,
                     "launches": 98}


def _preset(ours_split, torch_split):
    return {"preset": "gpt2-124m", "sides": {
        "ours eager": {"split": ours_split}, "ours graph": {"ms": 1.0},
        "torch eager": {"split": torch_split}}}


def test_the_table_shows_both_sides_and_ours_over_torch():
    ours = {"GEMM": 89.0, "attention": 10.0, "the rest": 20.0, "kernels_ms": 119.0,
            "launches": 1200}
    theirs = {"GEMM": 89.0, "attention": 8.0, "the rest": 25.0, "kernels_ms": 122.0,
              "launches": 900}
    lines = ss.table_lines([_preset(ours, theirs)])
    assert lines[0].startswith("step split (torch.profiler")
    assert lines[3] == ("gpt2-124m  ours eager           89.000       10.000       20.000"
                        "     119.000      1200")
    assert lines[4].startswith("gpt2-124m  torch eager          89.000        8.000")
    assert lines[5] == ("gpt2-124m  ours / torch          1.000        1.250        0.800"
                        "       0.975")


def test_a_failed_profile_is_a_row_and_no_split_no_section():
    lines = ss.table_lines([_preset({"error": "RuntimeError: CUPTI busy"}, None)])
    assert lines[3] == "gpt2-124m  ours eager     FAILED: RuntimeError: CUPTI busy"
    assert len(lines) == 4                                   # no ratio without both sides
    assert ss.table_lines([{"preset": "small", "sides": {"ours eager": {"ms": 1.0}}}]) == []


def test_measure_returns_the_profiler_error_instead_of_raising():
    # a torch module whose profiler cannot be imported, even where a real torch is installed
    broken = types.SimpleNamespace(__name__="torch_without_a_profiler",
                                   cuda=types.SimpleNamespace(synchronize=lambda: None))
    got = ss.measure(broken, lambda: None)
    assert list(got) == ["error"]
    assert got["error"].startswith("ModuleNotFoundError: No module named 'torch_without_a_profiler")


def test_bench_gpt2_prints_the_split_and_can_skip_it():
    assert bg.parse_args([]).split is True
    assert bg.parse_args(["--no-split"]).split is False
    ours = {"GEMM": 1.0, "attention": 2.0, "the rest": 3.0, "kernels_ms": 6.0, "launches": 7}
    payload = {"device": "NVIDIA H100", "torch": "2.11.0", "presets": [
        {"preset": "small", "batch": 16, "seq_len": 256, "sides": {
            "ours eager": bg._side(2.0, 4096, 1 << 20, [5.0], split=ours),
            "torch eager": bg._side(2.0, 4096, 1 << 20, [5.0], split=dict(ours, GEMM=2.0))}}]}
    bg.add_ratios(payload["presets"][0])
    text = bg.table(payload)
    assert "small      ours / torch          0.500        1.000        1.000" in text
