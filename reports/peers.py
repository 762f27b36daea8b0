"""The page "ours and our peers'": per op, our capsules beside the peers audited through
`--plugin conformance.peers.torch_cuda:ENTRIES` (records named `aten.<op>`: PyTorch's),
`--plugin conformance.peers.jax_xla:ENTRIES` (`xla.<op>`: JAX's) or
`--plugin conformance.peers.cupy_peer:ENTRIES` (`cupy_peer.<op>`: CuPy's), in every evidence
directory that holds such records: verdict, worst ulp error (forward, VJP), failure reasons, and the
throughput of each from `bench-kernels.json` in the same directory (benchmarks/bench_kernels.py
--json), when it is there."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.formats import BENCH_FORMAT
from conformance.jsonfile import RefusedFile, read_json
from conformance.peers.contracts import PEER_PREFIXES
from engine.capsule import ACCURATE
from reports import names
from reports.model import worst

BENCH_FILE = "bench-kernels.json"


@dataclass
class PeerSide:
    """One capsule's evidence in one directory, with its benchmark figures (large cases)."""
    name: str
    page: str
    status: str
    forward_ulps: object            # worst ulps, failing elements included ("nan": a NaN mismatch)
    vjp_ulps: object
    forward_ratio: object           # worst error / bound, failing elements included
    vjp_ratio: object
    reasons: list[tuple[str, int]]
    throughput: list[tuple[str, str, str]] = field(default_factory=list)  # (case, fwd, vjp)
    differences: list[tuple[str, str, int]] = field(default_factory=list)  # the peer's rules kept


@dataclass
class PeerOp:
    op: str
    ours: list[PeerSide]
    peers: list[PeerSide]


@dataclass
class ContractRow:
    """One op of a peer's contract page: the peer's documented semantics, conventions and
    accuracy, and its record's findings by class (conformance/peers/rejudge.py)."""
    op: str
    capsule: str
    semantics: str                  # the peer's page of the op
    conventions: list[tuple[str, str, str]]   # (clause, class, source)
    accuracy: str                   # "expf: 2 ulp" or "undocumented"
    accuracy_source: str
    status: str                     # the record's, rejudged: failed | passed | undecided
    defects: list[dict] = field(default_factory=list)
    kept: list[dict] = field(default_factory=list)          # conventions found
    undocumented: list[dict] = field(default_factory=list)  # with the measured figure
    undecided: list[dict] = field(default_factory=list)


@dataclass
class PeerContractTable:
    peer: str
    rows: list[ContractRow]


@dataclass
class PeerSection:
    directory: object               # reports.model.Directory
    ops: list[PeerOp]
    bench_note: str                 # where the throughput comes from, or why there is none
    ceiling_gbs: float | None
    contracts: list[PeerContractTable] = field(default_factory=list)


@dataclass
class PeerPage:
    """One peer's page: its contract, op by op, in every evidence directory that holds its
    records (the issue's "a report page per peer")."""
    page: str
    peer: str
    tables: list[tuple[object, PeerContractTable]]    # (reports.model.Directory, its table)


@dataclass
class PeersPage:
    page: str
    title: str
    sections: list[PeerSection]
    peer_pages: list[PeerPage] = field(default_factory=list)


def _peer_pages(sections: list[PeerSection]) -> list[PeerPage]:
    by_peer: dict[str, list] = {}
    for sec in sections:
        for t in sec.contracts:
            by_peer.setdefault(t.peer, []).append((sec.directory, t))
    return [PeerPage(names.peer_page(peer), peer, tables)
            for peer, tables in sorted(by_peer.items())]


def read_bench(directory: Path) -> tuple[dict | None, str]:
    """bench_kernels' JSON of the directory (or None) and a sentence saying which."""
    p = Path(directory) / BENCH_FILE
    if not p.is_file():
        return None, (f"no {BENCH_FILE} in this directory: throughput not measured in this run "
                      "(benchmarks/bench_kernels.py --json writes it)")
    try:
        doc = read_json(p, inside=directory)
    except (RefusedFile, ValueError) as exc:
        return None, f"{BENCH_FILE} could not be read ({exc}): throughput not shown"
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        return None, f"{BENCH_FILE} has no rows: throughput not shown"
    return doc, (f"throughput from {BENCH_FILE} (torch {doc.get('torch', '?')}): large cases, "
                 "forward and VJP; GB/s count bytes read + written")


def _rates(bench: dict | None, capsule: str | None, torch_side: bool
           ) -> list[tuple[str, str, str]]:
    """(case, forward rate, VJP rate) of the large cases of `capsule`'s benchmark rows: ours, or
    PyTorch's (measured in the same rows, on the same arrays)."""
    if bench is None or capsule is None:
        return []
    key = "_torch_rate" if torch_side else "_rate"
    return [(str(r.get("case", "")), str(r.get("fwd" + key, "-")), str(r.get("vjp" + key, "-")))
            for r in bench["rows"] if isinstance(r, dict) and r.get("capsule") == capsule
            and r.get("large") and "fwd" + key in r]


def _worst_ulps(ev, direction: str):
    """The record's worst ulps (elements within their bound) and the recorded failing elements':
    a NaN where a number belongs shows as "nan"."""
    stats = [s.worst_ulps for s in ev.stats if s.direction == direction]
    failures = [f for ce in ev.counterexamples for f in ce.failures + ce.shrunk_failures
                if f.reason.startswith("vjp-") == (direction == "vjp")]
    nan = [f for f in failures if "nan-mismatch" in f.reason]
    return "nan" if nan else worst(stats + [f.ulps for f in failures])


def _side(row, ev, throughput) -> PeerSide:
    # a NaN or inf mismatch by name: no ratio measures it (reports/verdicts.py)
    ratio = {d.direction: d.mismatches[0][0] if d.mismatches else d.worst
             for d in ev.worst_by_direction}
    return PeerSide(row.info.name, row.page, ev.status, _worst_ulps(ev, "forward"),
                    _worst_ulps(ev, "vjp"), ratio.get("forward"), ratio.get("vjp"),
                    list(ev.failure_reasons), throughput, list(ev.differences))


def _accurate(name: str) -> bool:
    """An op's accurate variant (engine/capsule.py's naming), shown after the plain capsule."""
    return name.endswith("." + ACCURATE)


def _default_benched(bench: dict | None, op: str) -> str | None:
    """The capsule whose benchmark rows carry PyTorch's figures of `op`: the first benched
    capsule of the op that is not an `.accurate` variant (else the first), whether or not this
    directory holds its evidence record."""
    benched = [r.get("capsule") for r in (bench or {}).get("rows", [])
               if isinstance(r, dict) and r.get("op") == op and "fwd_torch_rate" in r]
    plain = [n for n in benched if isinstance(n, str) and not _accurate(n)]
    return (plain or benched or [None])[0]


def build_peers(report) -> PeersPage | None:
    """The page, or None when no directory holds an aten.* record."""
    sections = []
    for i, directory in enumerate(report.directories):
        by_op: dict[str, tuple[list, list]] = {}
        for row in report.rows:
            ev = row.cells[i].evidence
            if ev is not None:
                by_op.setdefault(row.info.op, ([], []))[
                    row.info.name.startswith(PEER_PREFIXES)].append((row, ev))
        if not any(peers for _, peers in by_op.values()):
            continue
        bench, note = read_bench(Path(directory.path))
        ops = []
        for op in sorted(by_op):
            ours, peers = by_op[op]
            if not peers:
                continue
            device = peers[0][0].info.device
            ours = sorted((p for p in ours if p[0].info.device == device),
                          key=lambda p: (_accurate(p[0].info.name), p[0].info.name))
            torch_rates = _rates(bench, _default_benched(bench, op), True)
            ops.append(PeerOp(op, [_side(r, ev, _rates(bench, r.info.name, False))
                                   for r, ev in ours],
                              [_side(r, ev, torch_rates) for r, ev in peers]))
        ceiling = bench.get("copy_ceiling_gbs") if bench else None
        sections.append(PeerSection(directory, ops, note,
                                    ceiling if isinstance(ceiling, (int, float)) else None,
                                    contract_tables(Path(directory.path))))
    if not sections:
        return None
    return PeersPage(names.PEERS_PAGE, "ours and our peers'", sections, _peer_pages(sections))


def _finding(rc, directory: Path, record: dict) -> dict:
    return {"reason": rc.reason, "cases": rc.cases, "basis": rc.basis, "why": rc.why,
            "worst_ulps": rc.worst_ulps, "worst_ratio": rc.worst_ratio,
            "upstream": [(ref, "https://github.com/" + ref.replace("#", "/issues/"))
                         for ref in rc.upstream],
            "reproduce": _reproduce(rc.reason, directory, record) if rc.cls == "defect" else ""}


def _reproduce(reason: str, directory: Path, record: dict) -> str:
    """The reproduce command of a defect: the first replay file of the record's counterexamples
    of that reason (the copy in this directory's replays/ where there is one, else the path the
    record names) holding a failure of it that conformance/peers/reproducer.py writes a deciding
    script for (one that exits 1 while the defect stands); '' where none does."""
    from conformance.peers.reproducer import command_for
    for ce in record.get("counterexamples") or []:
        if not isinstance(ce, dict) or not isinstance(ce.get("replay_file"), str) or \
                not ce["replay_file"]:
            continue
        # schema_version 2 names the reasons a counterexample stands for; version 1 its failures
        reasons = ce.get("reasons") or [f.get("reason") for f in (ce.get("failures") or []) +
                                        (ce.get("shrunk_failures") or []) if isinstance(f, dict)]
        if reason not in reasons:
            continue
        recorded = Path(ce["replay_file"])
        local = directory / "replays" / recorded.name
        path = local if local.is_file() else recorded
        found = command_for(path, reason) if path.is_file() else None
        if found:
            return found
    return ""


def contract_tables(directory: Path) -> list[PeerContractTable]:
    """Per peer with records in `directory`: its contract, op by op, and each finding's class."""
    from conformance.peers.contracts import contract_for
    from conformance.peers.rejudge import rejudge
    tables: dict[str, list[ContractRow]] = {}
    for path in sorted(directory.glob("*.json")):
        if not path.name.startswith(PEER_PREFIXES):
            continue
        try:
            record = read_json(path, inside=directory)
        except (RefusedFile, ValueError):
            continue
        if not isinstance(record, dict):
            continue
        name = (record.get("capsule") or {}).get("name", "")
        contract = contract_for(record.get("plugin"), name)
        judged = rejudge(record, directory, contract) if contract is not None else None
        if judged is None:
            continue
        row = ContractRow(contract.op, name, contract.semantics,
                          [(c.clause.name, c.clause.to_json()["class"], c.clause.source)
                           for c in contract.conventions] +
                          [(c.clause.name, c.clause.to_json()["class"] + ", policy",
                            c.clause.source) for c in contract.policy],
                          contract.accuracy.in_words(),
                          contract.accuracy.calls or contract.accuracy.source, judged.status)
        for rc in judged.reasons:
            {"defect": row.defects, "convention": row.kept,
             "undocumented": row.undocumented}.get(rc.cls, row.undecided).append(
                _finding(rc, directory, record))
        for clause, n in sorted(judged.conventions.items()):
            row.kept.append({"reason": clause, "cases": None, "basis": "judged", "elements": n,
                             "why": "explained live by the clause", "worst_ulps": None,
                             "worst_ratio": None, "upstream": [], "reproduce": ""})
        for clause, n in sorted(judged.policy.items()):
            row.kept.append({"reason": clause, "cases": None, "basis": "observed", "elements": n,
                             "why": "admitted by the entries' numerical policy (the record's "
                                    "observation)", "worst_ulps": None, "worst_ratio": None,
                             "upstream": [], "reproduce": ""})
        for output, fig in sorted(judged.undocumented.items()):
            row.undocumented.append({"reason": f"{output} accuracy", "cases": fig.get("cases"),
                                     "basis": "judged", "why": "judged live",
                                     "worst_ulps": fig.get("worst_ulps"),
                                     "worst_ratio": fig.get("worst_ratio"), "upstream": [],
                                     "reproduce": ""})
        tables.setdefault(contract.peer, []).append(row)
    return [PeerContractTable(peer, rows) for peer, rows in sorted(tables.items())]
