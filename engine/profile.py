"""Backend profiles, the assurance policy, planning, the gate, and the accepted plan.

Registry -> profile + availability + assurance gate -> accepted plan -> binding (section 5.3.4).
A profile declares what its target provides; it never probes hardware.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from engine.capsule import ACCURATE, FLASH, ExecutableKernel, KernelCapsule
from engine.errors import GateRejectedError, NoMaintainedProfileError, PlanningError
from engine.registry import Registry, registry
from engine.types import (BackendOp, ClaimKind, Device, Evidence, Provider, RuntimeEntry,
                          TrustLevel, VJPMode)


@dataclass(frozen=True)
class AssurancePolicy:
    name: str
    allow_checked: bool = False
    allow_fuzzed: bool = False
    allow_trusted_external: bool = False
    require_evidence: bool = False
    allow_runtime_guards: bool = False
    allow_test_evidence: bool = False

    def allows_trust(self, trust: TrustLevel) -> bool:
        return {TrustLevel.verified: True, TrustLevel.checked: self.allow_checked,
                TrustLevel.fuzzed: self.allow_fuzzed,
                TrustLevel.trusted_external: self.allow_trusted_external}[trust]

    def allows_evidence(self, evidence: Evidence) -> bool:
        # A fuzz campaign against an oracle is test evidence; `allow_fuzzed` admits it too.
        return {Evidence.runtime_guard: self.allow_runtime_guards,
                Evidence.test_suite: self.allow_test_evidence,
                Evidence.fuzz_oracle: self.allow_test_evidence or self.allow_fuzzed,
                Evidence.trusted_boundary: self.allow_trusted_external,
                Evidence.not_applicable: True,
                Evidence.not_provided: False}[evidence]

    def with_evidence_required(self) -> "AssurancePolicy":
        return AssurancePolicy(**{**self.__dict__, "name": f"{self.name}+evidence",
                                  "require_evidence": True})


VERIFIED = AssurancePolicy("verified")
CHECKED = AssurancePolicy("checked", allow_checked=True, allow_runtime_guards=True,
                          allow_test_evidence=True)
EXTERNAL = AssurancePolicy("external", allow_checked=True, allow_runtime_guards=True,
                           allow_test_evidence=True, allow_trusted_external=True)
NAMED_POLICIES = {p.name: p for p in (VERIFIED, CHECKED, EXTERNAL)}


@dataclass(frozen=True)
class BackendProfile:
    name: str
    device: Device
    features: frozenset[Provider]        # providers the target is built with
    preferences: tuple[Provider, ...]    # tried first, in order; then catalogue order
    assurance: AssurancePolicy
    vjp_request: VJPMode = VJPMode.torchlean_tape
    op_preferences: Mapping[BackendOp, tuple[Provider, ...]] = field(default_factory=dict)
    # Capsule variants tried before an op's plain capsule of the same provider (e.g. "accurate":
    # native_cuda.softmax.accurate before native_cuda.softmax); other variants come after it.
    variant_preferences: tuple[str, ...] = ()
    # Fused entries this profile does not plan: their composition runs instead, under the op
    # preferences above (accurate_cuda's composed attention is not the flash kernels of
    # native_cuda.attention_heads).
    unplanned: frozenset = frozenset()

    def _rejection(self, cap: KernelCapsule, op: BackendOp) -> str | None:
        """Why `cap` is not admissible for `op` here, or None when it is."""
        if op in self.unplanned:
            return (f"profile `{self.name}` does not plan the fused entry `{op.label}`: its "
                    "composition runs, under the profile's op preferences")
        if cap.device is not self.device:
            return f"device `{cap.device.label}` is not the target's `{self.device.label}`"
        if cap.provider not in self.features:
            return (f"provider `{cap.provider.label}` is not a feature of target "
                    f"`{self.name}` (features: {', '.join(sorted(p.label for p in self.features))})")
        if not cap.supports_forward:
            return "capsule does not support forward execution"
        misaligned = contract_misalignment(cap)
        if misaligned:
            return misaligned
        if not self.assurance.allows_trust(cap.trust_level):
            return (f"trust `{cap.trust_level.label}` is not allowed by assurance policy "
                    f"`{self.assurance.name}`")
        if op.needs_vjp and not cap.vjp_mode.satisfies(self.vjp_request):
            return (f"vjp mode `{cap.vjp_mode.label}` does not satisfy the requested "
                    f"`{self.vjp_request.label}`")
        return None

    def candidate_order(self, op: BackendOp, reg: Registry) -> list[KernelCapsule]:
        prefs = self.op_preferences.get(op, ()) + self.preferences
        caps = reg.capsules(op)
        rank: dict[Provider, int] = {}
        for i, p in enumerate(prefs):
            rank.setdefault(p, i)   # an op's own preference outranks the general list
        def variant_rank(c: KernelCapsule) -> int:
            if c.variant in self.variant_preferences:
                return self.variant_preferences.index(c.variant)
            return len(self.variant_preferences) + (c.variant is not None)
        # Stable sort: preferred providers first, the rest keep catalogue (registration) order;
        # within a provider, preferred variants, then the plain capsule, then other variants.
        return sorted(caps, key=lambda c: (rank.get(c.provider, len(rank)), variant_rank(c)))

    def plans(self, entry) -> bool:
        """Whether this profile plans a capsule for `entry` (planning only, no gate: a gate that
        then refuses the capsule raises at dispatch, never falls back)."""
        return entry in self.plan([entry]).selected

    def plan(self, ops: Iterable[BackendOp], reg: Registry | None = None) -> "GraphPlan":
        reg = reg or registry()
        selected: dict[BackendOp, KernelCapsule] = {}
        rejections: dict[BackendOp, list[tuple[str, str]]] = {}
        for op in dict.fromkeys(ops):
            rejections[op] = []
            for cap in self.candidate_order(op, reg):
                why = self._rejection(cap, op) or _unavailable(reg, cap)
                if why is None and op not in selected:
                    selected[op] = cap
                elif why is not None:
                    rejections[op].append((cap.name, why))
        return GraphPlan(self, selected, rejections)

    def accept_graph(self, ops: Iterable[BackendOp], reg: Registry | None = None,
                     earned_trust: Mapping[str, TrustLevel | None] | None = None
                     ) -> "AcceptedGraphPlan":
        """Plan, gate, and bind; returns the plan only when every obligation passes."""
        reg = reg or registry()
        ops = list(dict.fromkeys(ops))
        graph = self.plan(ops, reg)
        missing = [op for op in ops if op not in graph.selected]
        if missing:
            lines = []
            for op in missing:
                why = graph.rejections[op] or [("-", "no capsule implements this op")]
                lines.append(f"{op.label}: " + "; ".join(f"{n}: {r}" for n, r in why))
            raise PlanningError(f"profile `{self.name}` has no admissible capsule for "
                                f"{', '.join(o.label for o in missing)}:\n  " + "\n  ".join(lines))
        reports = [r for cap in graph.selected.values()
                   for r in gate_obligations(cap, self.assurance, earned_trust)]
        failed = [r for r in reports if not r.passed]
        if failed:
            raise GateRejectedError(
                f"profile `{self.name}` gate rejected {len(failed)} obligation(s):\n  " +
                "\n  ".join(f"{r.capsule} [{r.obligation}]: {r.reason}" for r in failed))
        kernels = {op: ExecutableKernel.bind(cap, reg.handler(cap.name))
                   for op, cap in graph.selected.items()}
        return AcceptedGraphPlan(self, kernels, tuple(reports), graph.rejections)


def _unavailable(reg: Registry, cap: KernelCapsule) -> str | None:
    check = reg.handler(cap.name).unavailable
    return check() if check is not None else None


def contract_misalignment(cap: KernelCapsule) -> str | None:
    """Each descriptor must claim what its slot is for; the VJP claim must match the VJP mode."""
    expect = {"shape": ClaimKind.shape_safety, "layout": ClaimKind.layout_compatibility,
              "value": ClaimKind.value_refinement}
    for slot, kind in expect.items():
        got = cap.contracts[slot].claim.kind
        if got is not kind:
            return f"{slot} contract claims `{got.label}`, expected `{kind.label}`"
    vjp = cap.vjp_contract.claim
    if cap.vjp_mode is VJPMode.none:
        if vjp.kind is not ClaimKind.vjp_unavailable:
            return f"vjp contract claims `{vjp.label}` but the capsule's vjp mode is none"
        if cap.op.needs_vjp:
            return f"op `{cap.op.label}` needs a VJP but the capsule has vjp mode none"
    elif vjp.kind is not ClaimKind.vjp_refinement or vjp.vjp_mode is not cap.vjp_mode:
        return (f"vjp contract claims `{vjp.label}` but the capsule's vjp mode is "
                f"`{cap.vjp_mode.label}`")
    return None


@dataclass(frozen=True)
class ObligationReport:
    capsule: str
    obligation: str      # shape | layout | value | vjp | evidence
    passed: bool
    reason: str


def gate_obligations(cap: KernelCapsule, policy: AssurancePolicy,
                     earned_trust: Mapping[str, TrustLevel | None] | None) -> list[ObligationReport]:
    reports = []
    for slot, contract in cap.contracts.items():
        ev = contract.evidence
        ok = policy.allows_evidence(ev)
        reason = (f"claim {contract.claim.label} rests on {ev.label} evidence"
                  + ("" if ok else f", which assurance policy `{policy.name}` does not accept"))
        reports.append(ObligationReport(cap.name, slot, ok, reason))
    if policy.require_evidence:
        earned = (earned_trust or {}).get(cap.name)
        if earned is None:
            reports.append(ObligationReport(
                cap.name, "evidence", False, f"claims `{cap.trust_level.label}` but has earned "
                "nothing for this build; run `torchlean-conformance run` then `export-trust`"))
        else:
            ok = earned.at_least(cap.trust_level)
            reports.append(ObligationReport(
                cap.name, "evidence", ok, f"claims `{cap.trust_level.label}`, earned "
                f"`{earned.label}`" + ("" if ok else ": it claims more than it earned")))
    return reports


@dataclass(frozen=True)
class GraphPlan:
    profile: BackendProfile
    selected: dict[BackendOp, KernelCapsule]
    rejections: dict[BackendOp, list[tuple[str, str]]]


@dataclass(frozen=True)
class AcceptedGraphPlan:
    profile: BackendProfile
    kernels: dict[BackendOp, ExecutableKernel]
    obligations: tuple[ObligationReport, ...]
    rejections: dict[BackendOp, list[tuple[str, str]]]

    def kernel(self, op: BackendOp) -> ExecutableKernel:
        return self.kernels[op]


_CUDA_FEATURES = frozenset({Provider.native_cuda, Provider.cublas, Provider.cufft,
                            Provider.torchlean})
CHECKED_CPU = BackendProfile(
    "checked_cpu", Device.cpu, frozenset({Provider.reference}), (Provider.reference,), CHECKED)
# Attention through the tiled float32 kernel native_cuda.flash_attention: checked_cuda's since the
# flash capsule's H200 evidence came in (evidence/h200/native_cuda.flash_attention.json). Planning
# picks one capsule per op, not per shape: head dimensions over 128, which flash refuses with a
# ShapeError, need accurate_cuda (composed attention). Direct attention, the other native
# capsule, is planned only where flash is unavailable.
FLASH_ATTENTION = {
    "op_preferences": {BackendOp.scaled_dot_product_attention: (Provider.native_cuda,)},
    "variant_preferences": (FLASH,)}
CHECKED_CUDA = BackendProfile(
    "checked_cuda", Device.cuda, _CUDA_FEATURES,
    (Provider.cublas, Provider.native_cuda, Provider.cufft, Provider.torchlean), CHECKED,
    **FLASH_ATTENTION)
# checked_cuda's providers and gate, with each op's accurate variant (today's float64-inside
# kernel, where a faster float32 one became the plain capsule) tried first, and attention
# composed (cuBLAS products around a float64-inside softmax) rather than the float32 tiled kernel.
ACCURATE_CUDA = dataclasses.replace(
    CHECKED_CUDA, name="accurate_cuda", variant_preferences=(ACCURATE,),
    op_preferences={BackendOp.scaled_dot_product_attention: (Provider.torchlean,)},
    unplanned=frozenset({RuntimeEntry.attention_heads}))
# flash_cuda, the name checked_cuda's attention plan had before it became the default: kept
# because scripts, benchmarks and evidence notes name it.
FLASH_CUDA = dataclasses.replace(CHECKED_CUDA, name="flash_cuda")
# checked_cuda for a step captured into a CUDA graph (engine/graphs.py): attention through a
# native kernel (flash first), whose VJP decides nothing on the host (the composed capsule's
# tape VJP reads whether its inputs are finite). The same plan as checked_cuda today; kept as
# its own name so a captured step stays capturable whatever checked_cuda's attention becomes.
GRAPH_CUDA = dataclasses.replace(CHECKED_CUDA, name="graph_cuda")
LIBTORCH_FORWARD_CUDA = BackendProfile(
    "libtorch_forward_cuda", Device.cuda, _CUDA_FEATURES | {Provider.libtorch},
    (Provider.cublas, Provider.native_cuda, Provider.cufft, Provider.torchlean), EXTERNAL,
    op_preferences={BackendOp.scaled_dot_product_attention: (Provider.libtorch,
                                                             Provider.torchlean)},
    unplanned=frozenset({RuntimeEntry.attention_heads}))
PROFILES = {p.name: p for p in (CHECKED_CPU, CHECKED_CUDA, ACCURATE_CUDA, GRAPH_CUDA, FLASH_CUDA,
                                LIBTORCH_FORWARD_CUDA)}


def maintained_for_device(device: Device | str) -> BackendProfile:
    """The profile `--device` selects. libtorch_forward_cuda is never chosen this way."""
    if isinstance(device, str):
        device = Device.parse(device)
    if device is Device.cpu:
        return CHECKED_CPU
    if device is Device.cuda:
        return CHECKED_CUDA
    raise NoMaintainedProfileError(
        f"device `{device.label}` has no maintained runtime profile; maintained devices: cpu, cuda")


def profile_named(name: str) -> BackendProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise NoMaintainedProfileError(
            f"no profile named `{name}`; known profiles: {', '.join(PROFILES)}") from None
