"""Every label of the vocabulary, spelled as DESIGN.md lists it, and parsing back."""
import pytest

from engine.errors import UnknownDeviceError, UnknownLabelError
from engine.types import (BackendOp, Claim, ClaimKind, Contraction, Device, Evidence,
                          NumericalPolicy, Provider, Reduction, Rounding, Subnormals, TrustLevel,
                          VJPMode)

OPS = ("rand_uniform bernoulli_mask add sub mul scale abs sqrt clamp max min relu gelu sigmoid "
       "tanh softplus exp log sin cos inv safe_log log_softmax softmax hard_masked_softmax "
       "reduce_sum reduce_mean reshape permute broadcast concat slice gather scatter_add matmul "
       "linear mse_loss layer_norm batch_norm conv conv_transpose max_pool smooth_max_pool "
       "avg_pool fft_fno selective_scan scaled_dot_product_attention").split()

LABELS = {
    BackendOp: OPS,
    Provider: ["reference", "torchlean", "native-cuda", "libtorch", "aten", "mps", "webgpu",
               "cublas", "cudnn", "cufft", "xla", "neuron", "custom-chip", "external"],
    Device: ["cpu", "cuda", "rocm", "metal", "wasm", "tpu", "trainium", "custom", "external"],
    TrustLevel: ["verified", "checked", "fuzzed", "trusted-external"],
    VJPMode: ["none", "torchlean-tape", "backend-vjp"],
    Rounding: ["scalar-context", "nearest-even", "directed", "implementation-defined",
               "unspecified"],
    Subnormals: ["gradual-underflow", "flush-to-zero", "implementation-defined", "unspecified"],
    Contraction: ["separate", "fused", "implementation-defined", "n/a", "unspecified"],
    Reduction: ["fixed-left", "fixed-tree", "implementation-defined", "n/a", "unspecified"],
    Evidence: ["runtime-guard", "test-suite", "fuzz-oracle", "trusted-boundary", "n/a",
               "not-provided"],
    ClaimKind: ["shape-safety", "layout-compatibility", "value-refinement", "vjp-refinement",
                "vjp-unavailable"],
}


@pytest.mark.parametrize("enum", list(LABELS), ids=lambda e: e.__name__)
def test_labels_in_order_and_parse_back(enum):
    assert [m.label for m in enum] == LABELS[enum]
    for label in LABELS[enum]:
        assert enum.parse(label).label == label


def test_47_backend_ops_and_only_random_ops_need_no_vjp():
    assert len(BackendOp) == 47
    assert [o.label for o in BackendOp if not o.needs_vjp] == ["rand_uniform", "bernoulli_mask"]


def test_trust_order_strongest_first():
    assert TrustLevel.verified.at_least(TrustLevel.checked)
    assert TrustLevel.checked.at_least(TrustLevel.fuzzed)
    assert not TrustLevel.trusted_external.at_least(TrustLevel.fuzzed)


def test_vjp_mode_requests():
    assert VJPMode.backend_vjp.satisfies(VJPMode.torchlean_tape)
    assert VJPMode.torchlean_tape.satisfies(VJPMode.torchlean_tape)
    assert not VJPMode.torchlean_tape.satisfies(VJPMode.backend_vjp)
    assert not VJPMode.none.satisfies(VJPMode.torchlean_tape)


def test_policy_label():
    p = NumericalPolicy(Rounding.nearest_even, Subnormals.implementation_defined,
                        Contraction.implementation_defined, Reduction.implementation_defined)
    assert p.label == ("round=nearest-even, subnormal=implementation-defined, "
                       "contract=implementation-defined, reduce=implementation-defined")


def test_claim_labels():
    assert Claim(ClaimKind.layout_compatibility, layout="row-major").label == \
        "layout-compatibility(row-major)"
    assert Claim(ClaimKind.vjp_refinement, vjp_mode=VJPMode.backend_vjp).label == \
        "vjp-refinement(backend-vjp)"


def test_unknown_labels_list_the_known_ones():
    with pytest.raises(UnknownDeviceError, match="unknown device `gpu0`; known targets: cpu, cuda"):
        Device.parse("gpu0")
    with pytest.raises(UnknownLabelError, match="unknown TrustLevel `sure`; expected one of: "
                                                "verified, checked"):
        TrustLevel.parse("sure")
