"""The native source map: which .cu file and which kernel symbols implement each op, forward and
VJP, for the native-cuda provider; and the vendor-library entry points of the cublas provider.

engine/providers/native_cuda/ launches kernels by these names, the capsules' provenance quotes
them, and the harness hashes the files into each capsule's build fingerprint.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.types import BackendOp as Op


@dataclass(frozen=True)
class NativeSource:
    """Kernels of `file`, or of another file when written `other.cu:symbol`."""
    file: str                       # under engine/csrc/cuda/; "" when no kernel runs (a view)
    forward: tuple[str, ...]        # kernel symbols of the forward
    vjp: tuple[str, ...] = ()       # kernel symbols of the VJP

    @property
    def path(self) -> str:
        return f"engine/csrc/cuda/{self.file}" if self.file else \
            "engine/providers/native_cuda/shape.py"

    @property
    def symbols(self) -> str:
        return ", ".join(dict.fromkeys(self.forward + self.vjp))

    def kernels(self) -> list[tuple[str, str]]:
        """(file, symbol) of every kernel the forward and the VJP launch."""
        out = []
        for entry in dict.fromkeys(self.forward + self.vjp):
            file, _, symbol = entry.rpartition(":")
            out.append((file or self.file, symbol))
        return out


def _ew(fwd: str, *vjp: str) -> NativeSource:
    return NativeSource("elementwise.cu", (fwd,), tuple(vjp))


_REDUCE = ("tl_reduce_rows", "tl_reduce_cols")

SOURCES: dict[Op, NativeSource] = {
    Op.add: _ew("tl_add_fwd"),                       # VJP (g, g): no arithmetic
    Op.sub: _ew("tl_sub_fwd", "tl_neg"),
    Op.mul: _ew("tl_mul_fwd", "tl_mul_bwd"),
    Op.max: _ew("tl_max_fwd", "tl_max_bwd"),
    Op.min: _ew("tl_min_fwd", "tl_min_bwd"),
    Op.scale: _ew("tl_scale_fwd", "tl_scale_fwd"),
    Op.abs: _ew("tl_abs_fwd", "tl_abs_bwd"),
    Op.sqrt: _ew("tl_sqrt_fwd", "tl_sqrt_bwd"),
    Op.clamp: _ew("tl_clamp_fwd", "tl_clamp_bwd"),
    Op.relu: _ew("tl_relu_fwd", "tl_relu_bwd"),
    Op.gelu: _ew("tl_gelu_fwd", "tl_gelu_bwd"),
    Op.sigmoid: _ew("tl_sigmoid_fwd", "tl_sigmoid_bwd"),
    Op.tanh: _ew("tl_tanh_fwd", "tl_tanh_bwd"),
    Op.softplus: _ew("tl_softplus_fwd", "tl_softplus_bwd"),
    Op.exp: _ew("tl_exp_fwd", "tl_exp_bwd"),
    Op.log: _ew("tl_log_fwd", "tl_log_bwd"),
    Op.sin: _ew("tl_sin_fwd", "tl_sin_bwd"),
    Op.cos: _ew("tl_cos_fwd", "tl_cos_bwd"),
    Op.inv: _ew("tl_inv_fwd", "tl_inv_bwd"),
    Op.safe_log: _ew("tl_safe_log_fwd", "tl_safe_log_bwd"),
    Op.reduce_sum: NativeSource("reduce.cu", _REDUCE, ("shape.cu:tl_strided_copy",)),
    Op.reduce_mean: NativeSource("reduce.cu", _REDUCE + ("tl_div_f32", "tl_div_f64"),
                                 ("tl_div_f32", "tl_div_f64", "shape.cu:tl_strided_copy")),
    Op.broadcast: NativeSource("shape.cu", ("tl_strided_copy",),
                               ("reduce.cu:tl_reduce_rows", "reduce.cu:tl_reduce_cols")),
    Op.reshape: NativeSource("", ()),
    Op.permute: NativeSource("shape.cu", ("tl_strided_copy",), ("tl_strided_copy",)),
    Op.concat: NativeSource("shape.cu", ("tl_strided_place",), ("tl_strided_copy",)),
    Op.slice: NativeSource("shape.cu", ("tl_strided_copy",), ("tl_strided_place",)),
    Op.gather: NativeSource("index.cu", ("tl_gather",),
                            ("tl_scatter_add_atomic", "tl_scatter_add_ordered")),
    Op.scatter_add: NativeSource("index.cu", ("tl_scatter_add_atomic", "tl_scatter_add_ordered"),
                                 ("tl_gather",)),
    Op.mse_loss: NativeSource("loss.cu", ("tl_mse_partial", "tl_sum_partials", "tl_mse_finish"),
                              ("tl_mse_bwd",)),
    Op.rand_uniform: NativeSource("random.cu", ("tl_philox_uniform",)),
    Op.bernoulli_mask: NativeSource("random.cu", ("tl_bernoulli_mask",)),
    Op.softmax: NativeSource("softmax.cu", ("tl_softmax_fwd",), ("tl_softmax_bwd",)),
    Op.log_softmax: NativeSource("softmax.cu", ("tl_log_softmax_fwd",), ("tl_log_softmax_bwd",)),
    Op.hard_masked_softmax: NativeSource("softmax.cu", ("tl_masked_softmax_fwd",),
                                         ("tl_masked_softmax_bwd",)),
    Op.layer_norm: NativeSource("norm.cu", ("tl_layer_norm_fwd",), ("tl_layer_norm_bwd",)),
    Op.batch_norm: NativeSource("norm.cu", ("tl_batch_norm_fwd",), ("tl_batch_norm_bwd",)),
    # native_cuda.direct_attention: one instantiation per tile height (1, 2, 4, 8 rows or keys).
    Op.scaled_dot_product_attention: NativeSource(
        "attention.cu", tuple(f"tl_attn_fwd_{t}" for t in (1, 2, 4, 8)),
        tuple(f"tl_attn_bwd_{p}_{t}" for p in ("rows", "cols") for t in (1, 2, 4, 8))),
}

ADAM_STEP = NativeSource("optim.cu", ("tl_adam_step",))


def _tape(*vjp: str) -> NativeSource:
    return NativeSource("tape.cu", (), tuple(vjp))


# The tape's local VJP rules on CUDA (engine/ops/*.py through engine/ops/_tape_cuda.py): the
# kernels a torchlean-tape capsule's VJP runs on CuPy arrays, so its build fingerprint can hash
# them. No forward kernels: the capsule's own forward is elsewhere. add's VJP (g, g) runs none;
# the rules of engine.ops.TAPE_FLUSHES_ON_CUDA run CuPy and cuBLAS, not our kernels; the pure
# data-movement rules run CuPy copies.
TAPE_SOURCES: dict[Op, NativeSource] = {
    Op.sub: _tape("tl_tape_neg"),
    Op.mul: _tape("tl_tape_mul"),
    Op.max: _tape("tl_tape_max"),
    Op.min: _tape("tl_tape_min"),
    Op.scale: _tape("tl_tape_scale"),
    Op.abs: _tape("tl_tape_abs"),
    Op.sqrt: _tape("tl_tape_sqrt"),
    Op.clamp: _tape("tl_tape_clamp"),
    Op.relu: _tape("tl_tape_relu"),
    Op.gelu: _tape("tl_tape_gelu"),
    Op.sigmoid: _tape("tl_tape_sigmoid"),
    Op.tanh: _tape("tl_tape_tanh"),
    Op.softplus: _tape("tl_tape_softplus"),
    Op.exp: _tape("tl_tape_exp"),
    Op.log: _tape("tl_tape_log"),
    Op.sin: _tape("tl_tape_sin"),
    Op.cos: _tape("tl_tape_cos"),
    Op.inv: _tape("tl_tape_inv"),
    Op.safe_log: _tape("tl_tape_safe_log"),
    Op.reduce_mean: _tape("tl_tape_div_scalar"),
    Op.mse_loss: _tape("tl_tape_mse"),
    Op.gather: NativeSource("index.cu", (), ("tl_scatter_add_ordered",)),
}

# engine/runtime/poison.py: the fill of every device block handed out while poisoning is on.
POISON_FILL = NativeSource("poison.cu", ("tl_poison_fill",))

# torchlean.composed_attention (engine/providers/composed.py): cuBLAS for both products, our
# hard-masked softmax row kernel between them, and the fix-up for NaNs a blocked key's v leaks.
COMPOSED_ATTENTION = NativeSource("softmax.cu",
                                  ("tl_masked_softmax_fwd", "attention.cu:tl_attn_fixup"))
COMPOSED_CUBLAS_SYMBOLS = ("cublasSgemm_v2", "cublasSgemmStridedBatched")

# The cublas provider's arithmetic is cuBLAS itself (no .cu file of ours).
CUBLAS_SYMBOLS: dict[Op, tuple[str, ...]] = {
    Op.matmul: ("cublasSgemm_v2", "cublasSgemmStridedBatched"),
    Op.linear: ("cublasSgemm_v2", "cublasSgemv_v2"),
}


def files_for(op: Op) -> tuple[str, ...]:
    """Every .cu file a native-cuda capsule of `op` runs (forward and VJP): what its build
    fingerprint must hash."""
    return tuple(dict.fromkeys(f for f, _ in SOURCES[op].kernels()))


def tape_files_for(op: Op) -> tuple[str, ...]:
    """Every .cu file the tape's local VJP rule of `op` runs on CUDA (empty when it runs none of
    ours): what the build fingerprint of a torchlean-tape capsule on CUDA must hash."""
    src = TAPE_SOURCES.get(op)
    return () if src is None else tuple(dict.fromkeys(f for f, _ in src.kernels()))
