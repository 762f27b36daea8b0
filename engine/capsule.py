"""Kernel capsules (the audit record of one op/provider pair), handlers, and their binding."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from engine.errors import BindingMismatchError, CapsuleNameError
from engine.types import (BackendOp, Claim, ClaimKind, ContractDescriptor, DeclaredBound, Device,
                          Evidence, NumericalPolicy, Provenance, Provider, TrustLevel, VJPMode)


# Dotted identifiers only: names become evidence file names, so no separator, dot-dot or space.
CAPSULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


def check_capsule_name(name) -> str:
    """`name` when it is a dotted identifier of at least two parts, else CapsuleNameError."""
    if not isinstance(name, str) or not CAPSULE_NAME.fullmatch(name) or len(name) > 200:
        raise CapsuleNameError(
            f"capsule name {name!r} is not a dotted identifier; expected parts of letters, digits "
            "and underscores joined by dots, e.g. `user.my_add` (no '/', '..', '-' or spaces: the "
            "name becomes the evidence file's name)")
    return name


# A second capsule of one op from one provider is a variant, named `<provider>.<op>.<variant>`;
# "accurate" is the variant a profile that prefers accuracy over speed tries first.
ACCURATE = "accurate"
# "flash" is native_cuda.flash_attention, the tiled float32 kernel of scaled_dot_product_attention
# beside the plain native_cuda.direct_attention (its name, like the plain one's, reads as the
# kernel's, so the variant is declared, not read from the name).
FLASH = "flash"


def capsule_variant(name: str, provider: Provider, op) -> str | None:
    stem = f"{provider.name_prefix}.{op.label}."
    return name[len(stem):] if name.startswith(stem) else None


@dataclass(frozen=True)
class KernelCapsule:
    name: str
    op: BackendOp   # or a RuntimeEntry (packed rfft/irfft): engine/types.py
    provider: Provider
    device: Device
    trust_level: TrustLevel
    supports_forward: bool
    vjp_mode: VJPMode
    shape_contract: ContractDescriptor
    layout_contract: ContractDescriptor
    value_contract: ContractDescriptor
    vjp_contract: ContractDescriptor
    numerical_policy: NumericalPolicy
    notes: str = ""
    variant_name: str | None = None   # a variant whose name is not `<provider>.<op>.<variant>`
    # The ulps within which the harness's derived bounds take this capsule's float32 elementary
    # functions (conformance/error_terms.py): libdevice's 2, unless the build says otherwise
    # (a native-cuda build with --use_fast_math: __expf's 106, stated in its notes).
    elementary_ulps: float = 2.0

    def __post_init__(self) -> None:
        check_capsule_name(self.name)

    @property
    def contracts(self) -> dict[str, ContractDescriptor]:
        return {"shape": self.shape_contract, "layout": self.layout_contract,
                "value": self.value_contract, "vjp": self.vjp_contract}

    @property
    def variant(self) -> str | None:
        """The variant of an op's capsule: what follows `<provider>.<op>.` in its name
        (`native_cuda.softmax.accurate` -> "accurate"), or the variant it declares
        (`native_cuda.flash_attention` -> "flash"); None for the op's plain capsule."""
        return self.variant_name or capsule_variant(self.name, self.provider, self.op)

    def report_lines(self) -> list[str]:
        """The backend report block of section 5.3.1."""
        return [f"{self.op.label}: {self.name}",
                f"  provider={self.provider.label} declared-trust={self.trust_level.label} "
                f"vjp={self.vjp_mode.label}",
                f"  numeric=[{self.numerical_policy.label}]"]


@dataclass(frozen=True)
class KernelHandler:
    """What executes a capsule. `forward(*arrays, **params)` and, for backend-vjp capsules,
    `vjp(inputs, output, grad_out, **params)`, as docs/OPS.md specifies."""
    name: str
    op: BackendOp   # or a RuntimeEntry, as the capsule
    provider: Provider
    device: Device
    forward: Callable
    vjp: Callable | None = None
    # Availability: None when the handler's library is present, else why it is not. Planning
    # never selects an unavailable capsule, and says why (the registry keeps it as a description).
    unavailable: Callable[[], str | None] | None = None
    # Declared support: declines(inputs, params) -> None for a case the kernel supports, else why
    # not (a shape it refuses with a named error, e.g. a shared-memory bound). The harness skips
    # such cases and says so; it never treats an undeclared refusal as support.
    declines: Callable[[tuple, dict], str | None] | None = None


@dataclass(frozen=True)
class ExecutableKernel:
    capsule: KernelCapsule
    handler: KernelHandler

    @classmethod
    def bind(cls, capsule: KernelCapsule, handler: KernelHandler) -> "ExecutableKernel":
        for field_name in ("op", "provider", "device"):
            want, got = getattr(capsule, field_name), getattr(handler, field_name)
            if want is not got:
                raise BindingMismatchError(
                    f"cannot bind handler `{handler.name}` to capsule `{capsule.name}`: "
                    f"{field_name} is `{got.label}` on the handler but `{want.label}` on the "
                    f"capsule; register a handler whose {field_name} matches the capsule")
        if capsule.vjp_mode is VJPMode.backend_vjp and handler.vjp is None:
            raise BindingMismatchError(
                f"cannot bind handler `{handler.name}` to capsule `{capsule.name}`: the capsule "
                f"declares vjp=backend-vjp but the handler has no vjp function; supply one or "
                f"declare vjp=torchlean-tape")
        return cls(capsule, handler)


def standard_capsule(op: BackendOp, provider: Provider, device: Device, *,
                     trust: TrustLevel, vjp_mode: VJPMode, policy: NumericalPolicy,
                     source_file: str, native_symbol: str = "", layout: str = "row-major-contiguous",
                     value_summary: str = "", value_evidence: Evidence = Evidence.test_suite,
                     vjp_evidence: Evidence = Evidence.test_suite,
                     declared_bound: DeclaredBound | None = None, notes: str = "",
                     name: str | None = None, variant: str | None = None) -> KernelCapsule:
    """A capsule with the conventional four contracts: shapes and layout guarded at run time,
    values and VJP backed by the evidence named."""
    prov = Provenance(source_file, native_symbol)
    if vjp_mode is VJPMode.none:
        vjp = ContractDescriptor(Claim(ClaimKind.vjp_unavailable), f"{op.label} has no VJP",
                                 Evidence.not_applicable, prov)
    else:
        vjp = ContractDescriptor(Claim(ClaimKind.vjp_refinement, vjp_mode=vjp_mode),
                                 f"the VJP of {op.label} as docs/OPS.md states it",
                                 vjp_evidence, prov)
    return KernelCapsule(
        name=name or f"{provider.name_prefix}.{op.label}", op=op, provider=provider, device=device,
        trust_level=trust, supports_forward=True, vjp_mode=vjp_mode,
        shape_contract=ContractDescriptor(
            Claim(ClaimKind.shape_safety), "logical shapes, flat lengths and UInt32 extents are "
            "checked before the call and the output length after it", Evidence.runtime_guard, prov),
        layout_contract=ContractDescriptor(
            Claim(ClaimKind.layout_compatibility, layout=layout),
            "inputs and outputs are contiguous float32 buffers in row-major order",
            Evidence.runtime_guard, prov),
        value_contract=ContractDescriptor(
            Claim(ClaimKind.value_refinement),
            value_summary or f"{op.label} as docs/OPS.md states it, within the error model of "
                             f"the numerical policy", value_evidence, prov, declared_bound),
        vjp_contract=vjp, numerical_policy=policy, notes=notes, variant_name=variant)
