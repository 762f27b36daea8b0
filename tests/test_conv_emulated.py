"""conv.cu's kernels on the CPU through a host emulation (tests/emulated/conv_host.cpp: a thread
per CUDA thread, a barrier per block), driven by the native provider's own host code: the GPU
tests' cases judged by the harness's error models, the tiled 2-D kernels against the generic
ones bit for bit, deterministic repeats, and every kernel launched at least once. The GPU runs
the same tests for real (tests/test_cuda_conv.py)."""
from __future__ import annotations

import numpy as np
import pytest

import cuda_helpers as H
import test_cuda_conv as cases
from emulated import conv_emulator as emu
from emulated.host_build import require


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    built = emu.build(tmp_path_factory.mktemp("conv_emulation"))
    require(built)
    return built


@pytest.fixture
def calls(lib, monkeypatch):
    counts = emu.install(monkeypatch, lib)
    monkeypatch.setattr(H, "cupy", lambda: emu._Module)
    return counts


@pytest.mark.parametrize("op", ["conv", "conv_transpose"])
@pytest.mark.parametrize("case", cases.CASES, ids=cases.IDS)
def test_emulated_forward_and_vjp_within_the_derived_bound(calls, op, case):
    cases.test_native_forward_and_vjp_within_the_derived_bound(op, case)
    assert calls, "no kernel ran"


TWO_D = [c for c in cases.CASES if len(c[4]) == 2 and c[0] != 0]


@pytest.mark.parametrize("case", TWO_D)
def test_emulated_tiled_kernels_equal_the_generic_ones_bit_for_bit(calls, case):
    cases.test_tiled_2d_forward_equals_the_nd_kernel_and_the_declared_fold_bit_for_bit(case)
    for symbol in ("tl_conv_fwd_nd", "tl_conv_dx_nd", "tl_conv2d_dw_tiled", "tl_conv_dw_chunks"):
        assert calls.get(symbol), symbol
    # small grids take the 64-pixel variant (test_emulated_both_forward_tile_widths forces each)
    assert calls.get("tl_conv2d_fwd_tiled") or calls.get("tl_conv2d_fwd_tiled_n64")


@pytest.mark.parametrize("wide", [True, False])
def test_emulated_both_forward_tile_widths(calls, wide, monkeypatch):
    cases.test_both_forward_tile_widths_equal_the_nd_kernels_bit_for_bit(wide, monkeypatch)
    assert calls.get("tl_conv2d_fwd_tiled" if wide else "tl_conv2d_fwd_tiled_n64")


def test_emulated_large_tiles(calls):
    cases.test_large_2d_tiles_agree_with_the_nd_kernel_and_float64((1, 17, 70, 57, 9))


@pytest.mark.parametrize("op", ["conv", "conv_transpose"])
def test_emulated_chunked_backward_repeats_and_modes_agree(calls, op):
    # N = 2 rather than the GPU's 8: 1152 positions still make two dKernel chunks
    cases.check_deterministic_backward(op, 2)
    for symbol in ("tl_conv_sum_chunks", "tl_conv_db_chunks", "tl_conv_neg_zeros"):
        assert calls.get(symbol), symbol
