"""The vocabulary of the runtime: ops, providers, devices, trust, VJP modes, numerical policy, contracts.

Every enum's value is its report label, spelled as in DESIGN.md; `parse` turns a label back into a member.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from engine.errors import UnknownDeviceError, UnknownLabelError


class _Labelled(Enum):
    # Members are singletons compared by identity: the C identity hash keeps dict lookups keyed
    # by ops off the Python-level Enum.__hash__ on the dispatch path.
    __hash__ = object.__hash__

    @property
    def label(self) -> str:
        return self._value_   # Enum's `value` is itself a Python-level property: read once less

    @classmethod
    def parse(cls, text: str):
        for member in cls:
            if member.value == text:
                return member
        known = ", ".join(m.value for m in cls)
        raise UnknownLabelError(f"unknown {cls.__name__} `{text}`; expected one of: {known}")

    def __str__(self) -> str:
        return self.value


class BackendOp(_Labelled):
    rand_uniform = "rand_uniform"
    bernoulli_mask = "bernoulli_mask"
    add = "add"
    sub = "sub"
    mul = "mul"
    scale = "scale"
    abs = "abs"
    sqrt = "sqrt"
    clamp = "clamp"
    max = "max"
    min = "min"
    relu = "relu"
    gelu = "gelu"
    sigmoid = "sigmoid"
    tanh = "tanh"
    softplus = "softplus"
    exp = "exp"
    log = "log"
    sin = "sin"
    cos = "cos"
    inv = "inv"
    safe_log = "safe_log"
    log_softmax = "log_softmax"
    softmax = "softmax"
    hard_masked_softmax = "hard_masked_softmax"
    reduce_sum = "reduce_sum"
    reduce_mean = "reduce_mean"
    reshape = "reshape"
    permute = "permute"
    broadcast = "broadcast"
    concat = "concat"
    slice = "slice"
    gather = "gather"
    scatter_add = "scatter_add"
    matmul = "matmul"
    linear = "linear"
    mse_loss = "mse_loss"
    layer_norm = "layer_norm"
    batch_norm = "batch_norm"
    conv = "conv"
    conv_transpose = "conv_transpose"
    max_pool = "max_pool"
    smooth_max_pool = "smooth_max_pool"
    avg_pool = "avg_pool"
    fft_fno = "fft_fno"
    selective_scan = "selective_scan"
    scaled_dot_product_attention = "scaled_dot_product_attention"

    @property
    def needs_vjp(self) -> bool:
        # Random draws are constants of the graph: nothing flows back through them.
        return self not in _NO_VJP


# (a set of members: reading BackendOp.<member> goes through Enum's class machinery each time)
_NO_VJP = frozenset((BackendOp.rand_uniform, BackendOp.bernoulli_mask))


class RuntimeEntry(_Labelled):
    """Runtime entry points below the BackendOp vocabulary (TorchLean's chapter: "lower-level
    kernels additionally expose packed real FFT ... entrypoints used by focused runtime paths and
    tests"). They are not BackendOps (DESIGN.md's list is TorchLean's vocabulary), but they have
    capsules of their own: a capsule's `op` may name one, and the registry, planning, dispatch
    and the harness key on it exactly as on a BackendOp (both have `label` and `needs_vjp`).
    cross_entropy is the fused loss of section 5.3.7 (one tape op with its local VJP, in place of
    log_softmax + gather + reduce_mean + scale), and bias_gelu likewise for gelu(x + b) (add of a
    broadcast bias, then gelu), and attention_heads for multi-head attention on the packed
    [B, T, H*D] layout (reshape, permute, scaled_dot_product_attention with the causal triangle
    or no mask, permute back), and add_layer_norm for a pre-norm block's residual add and layer
    norm (add, then layer_norm of the sum; the sum and the normalised rows stacked as one output
    that the wrapper hands out as two views): scheduling choices, not new semantics."""
    rfft = "rfft"
    irfft = "irfft"
    cross_entropy = "cross_entropy"
    bias_gelu = "bias_gelu"
    attention_heads = "attention_heads"
    add_layer_norm = "add_layer_norm"

    @property
    def needs_vjp(self) -> bool:
        return True


class Provider(_Labelled):
    reference = "reference"
    torchlean = "torchlean"
    native_cuda = "native-cuda"
    libtorch = "libtorch"
    aten = "aten"
    mps = "mps"
    webgpu = "webgpu"
    cublas = "cublas"
    cudnn = "cudnn"
    cufft = "cufft"
    xla = "xla"
    neuron = "neuron"
    custom_chip = "custom-chip"
    external = "external"

    @property
    def name_prefix(self) -> str:
        """The prefix of capsule names: `native_cuda.matmul`, `custom_chip.add`."""
        return self.value.replace("-", "_")


class Device(_Labelled):
    cpu = "cpu"
    cuda = "cuda"
    rocm = "rocm"
    metal = "metal"
    wasm = "wasm"
    tpu = "tpu"
    trainium = "trainium"
    custom = "custom"
    external = "external"

    @classmethod
    def parse(cls, text: str) -> "Device":
        try:
            return super().parse(text)
        except UnknownLabelError:
            known = ", ".join(m.value for m in cls)
            raise UnknownDeviceError(
                f"unknown device `{text}`; known targets: {known}") from None


class TrustLevel(_Labelled):
    """Strongest first; `rank` 0 is the strongest."""
    verified = "verified"
    checked = "checked"
    fuzzed = "fuzzed"
    trusted_external = "trusted-external"

    @property
    def rank(self) -> int:
        return list(TrustLevel).index(self)

    def at_least(self, other: "TrustLevel") -> bool:
        return self.rank <= other.rank


class VJPMode(_Labelled):
    none = "none"
    torchlean_tape = "torchlean-tape"
    backend_vjp = "backend-vjp"

    def satisfies(self, requested: "VJPMode") -> bool:
        """A torchlean-tape request accepts either gradient owner; backend-vjp only itself."""
        if requested is VJPMode.torchlean_tape:
            return self in (VJPMode.torchlean_tape, VJPMode.backend_vjp)
        return self is requested


class Rounding(_Labelled):
    scalar_context = "scalar-context"
    nearest_even = "nearest-even"
    directed = "directed"
    implementation_defined = "implementation-defined"
    unspecified = "unspecified"


class Subnormals(_Labelled):
    gradual_underflow = "gradual-underflow"
    flush_to_zero = "flush-to-zero"
    implementation_defined = "implementation-defined"
    unspecified = "unspecified"


class Contraction(_Labelled):
    separate = "separate"
    fused = "fused"
    implementation_defined = "implementation-defined"
    not_applicable = "n/a"
    unspecified = "unspecified"


class Reduction(_Labelled):
    fixed_left = "fixed-left"
    fixed_tree = "fixed-tree"
    implementation_defined = "implementation-defined"
    not_applicable = "n/a"
    unspecified = "unspecified"


@dataclass(frozen=True)
class NumericalPolicy:
    rounding: Rounding
    subnormals: Subnormals
    contraction: Contraction
    reduction: Reduction

    @property
    def label(self) -> str:
        return (f"round={self.rounding.label}, subnormal={self.subnormals.label}, "
                f"contract={self.contraction.label}, reduce={self.reduction.label}")


class ClaimKind(_Labelled):
    shape_safety = "shape-safety"
    layout_compatibility = "layout-compatibility"
    value_refinement = "value-refinement"
    vjp_refinement = "vjp-refinement"
    vjp_unavailable = "vjp-unavailable"


@dataclass(frozen=True)
class Claim:
    """What a contract asserts; layout and VJP claims carry their parameter."""
    kind: ClaimKind
    layout: str | None = None
    vjp_mode: VJPMode | None = None

    @property
    def label(self) -> str:
        if self.kind is ClaimKind.layout_compatibility:
            return f"layout-compatibility({self.layout})"
        if self.kind is ClaimKind.vjp_refinement:
            return f"vjp-refinement({self.vjp_mode.label})"
        return self.kind.label


class Evidence(_Labelled):
    runtime_guard = "runtime-guard"
    test_suite = "test-suite"
    fuzz_oracle = "fuzz-oracle"
    trusted_boundary = "trusted-boundary"
    not_applicable = "n/a"
    not_provided = "not-provided"


@dataclass(frozen=True)
class Provenance:
    source_file: str
    native_symbol: str = ""
    note: str = ""


@dataclass(frozen=True)
class DeclaredBound:
    """An error bound a capsule declares rather than derives, per output element:
    `ulps` float32 ulps of the rounded reference, plus `magnitude_units` times u = 2^-24 times the
    reference's magnitude (the sum of |terms|) for outputs that can cancel, plus `absolute` in the
    output's own units (an intrinsic documented by its absolute error on part of its domain, e.g.
    --use_fast_math's __logf near 1); with the reason that justifies the numbers."""
    ulps: float
    reason: str
    magnitude_units: float = 0.0
    absolute: float = 0.0


@dataclass(frozen=True)
class ContractDescriptor:
    claim: Claim
    summary: str
    evidence: Evidence
    provenance: Provenance
    # Only value contracts use this: an explicit bound for library functions and composites.
    declared_bound: DeclaredBound | None = field(default=None)
