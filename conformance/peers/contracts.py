"""Which peer contract judges which capsule (or 16-bit kernel): chosen by the plugin spec the user
passed, never by what a kernel process says about itself, so only our own peer modules get a
peer's contract (conformance/peers/contract.py)."""
from __future__ import annotations

from typing import Callable

from conformance.peers.contract import PeerContract


def contract_for(plugin: str | None, capsule_name: str) -> PeerContract | None:
    """The contract of a peer capsule audited through one of our peer modules, else None."""
    if not plugin:
        return None
    table = CONTRACTS.get(plugin)
    return table().get(capsule_name) if table is not None else None


def lowp_contract_for(plugin: str | None, op: str) -> PeerContract | None:
    """The contract of a 16-bit kernel of op `op` (the op the judge's reference is chosen by)
    audited through one of our 16-bit peer modules, else None."""
    if not plugin:
        return None
    table = LOWP_CONTRACTS.get(plugin)
    return table().get(op) if table is not None else None


def _torch_contracts() -> dict[str, PeerContract]:
    from conformance.peers.torch_contract import contracts
    return contracts()


def _torch_lowp_contracts() -> dict[str, PeerContract]:
    from conformance.peers.torch_contract import lowp_contracts
    return lowp_contracts()


def _jax_contracts() -> dict[str, PeerContract]:
    from conformance.peers.jax_contract import contracts
    return contracts()


def _cupy_contracts() -> dict[str, PeerContract]:
    from conformance.peers.cupy_contract import contracts
    return contracts()


# plugin spec -> the contracts of its capsules (by capsule name)
CONTRACTS: dict[str, Callable[[], dict[str, PeerContract]]] = {
    "conformance.peers.torch_cuda:ENTRIES": _torch_contracts,
    "conformance.peers.jax_xla:ENTRIES": _jax_contracts,
    "conformance.peers.cupy_peer:ENTRIES": _cupy_contracts,
}
# the capsule-name prefixes of our peer modules' records (torch_cuda's, jax_xla's, cupy_peer's):
# which records classify-peers and the report's peers page read (each then by its plugin spec)
PEER_PREFIXES = ("aten.", "xla.", "cupy_peer.")
# 16-bit plugin spec (torchlean-conformance lowp) -> the contracts of its kernels (by op)
LOWP_CONTRACTS: dict[str, Callable[[], dict[str, PeerContract]]] = {
    "conformance.peers.torch_lowp:ENTRIES": _torch_lowp_contracts,
    "conformance.peers.torch_lowp:BINARY_ENTRIES": _torch_lowp_contracts,
    "conformance.peers.torch_lowp:ADD_MUL": _torch_lowp_contracts,
}
