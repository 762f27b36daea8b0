"""Page file names and anchor ids: one place, so the builder, the writer and the
TRUST_BOUNDARIES.md check agree on every link."""
from __future__ import annotations

import hashlib
import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX = 80

INDEX_PAGE = "index.html"
PEERS_PAGE = "peers.html"   # ours and our peers' (reports/peers.py)
PEER_PAGE_GLOB = "peer-*.html"   # one page per peer: its own contract, op by op
DEVICES_PAGE = "devices.html"   # capsules x devices of a Dask run (reports/devices.py)
EXHAUSTIVE_PAGE = "exhaustive.html"   # verified by exhaustion (reports/exhaustive.py)
LOWP_PAGE = "lowp.html"   # 16-bit kernels (reports/lowp.py)
FLAGS_PAGE = "flags.html"   # the compile-flag matrix (reports/flags.py)
GPUS_PAGE = "gpus.html"   # capsules x GPUs, one column per GPU evidence directory (reports/gpus.py)
SUITE_PAGES = {"guards": "suite-guards.html", "allocator-cap": "suite-allocator-cap.html",
               "determinism": "suite-determinism.html"}


def slug(name: str) -> str:
    """A file-name- and id-safe form of `name`, stable across runs. Names that are already safe
    (`reference.add`, `native_cuda.matmul`) stay as they are; any other name gets its unsafe
    characters replaced and a short hash of the original appended, so two names never collide."""
    safe = _UNSAFE.sub("_", name)[:_MAX]
    if safe == name and name and not name.startswith("."):
        return name
    return f"{safe.strip('.') or 'x'}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def peer_page(peer: str) -> str:
    """The page of one peer's contract ("PyTorch" -> peer-pytorch.html)."""
    return f"peer-{slug(peer.lower())}.html"


def capsule_page(name: str) -> str:
    return f"capsule-{slug(name)}.html"


def capsule_anchor(name: str) -> str:
    """The id of the capsule page's heading and of the capsule's row on the index."""
    return f"capsule-{slug(name)}"


def op_anchor(op: str) -> str:
    return f"op-{slug(op)}"


def evidence_anchor(directory_slug: str) -> str:
    """The id of one evidence directory's section on a capsule page."""
    return f"evidence-{directory_slug}"


def capsule_citation(name: str) -> str:
    """What TRUST_BOUNDARIES.md links to: the page and the anchor of its heading."""
    return f"{capsule_page(name)}#{capsule_anchor(name)}"
