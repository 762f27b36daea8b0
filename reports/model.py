"""The report's data model: plain dataclasses filled only from evidence records (capsule records,
suite records, trust exports). No rendering and no HTML here; numbers stay as the records hold
them (float, or the strings "inf"/"nan" that JSON forces), formatting is the writer's job."""
from __future__ import annotations

from dataclasses import dataclass, field

from conformance.exit_codes import KERNEL_FAILED

Number = float | int | str | None

# Row outcomes: a partition of the capsules (every capsule is exactly one of these).
PASSING, FAILING, UNAUDITED = "passing", "failing", "unaudited"
FAILING_STATUSES = KERNEL_FAILED      # a kernel failed: the statuses `run` exits 1 for
# No kernel verdict: the run was stopped, the harness itself failed, or it cannot run the capsule.
NO_VERDICT_STATUSES = ("interrupted", "harness-error", "unsupported")


@dataclass
class Unusable:
    """An evidence file the report could not use: which, what is wrong, what to do."""
    file: str
    what: str
    todo: str

    def line(self) -> str:
        return f"{self.file}: {self.what}; {self.todo}"


@dataclass
class Contract:
    kind: str                       # shape | layout | value | vjp
    claim: str
    summary: str
    evidence: str
    source_file: str
    native_symbol: str | None
    declared_ulps: Number           # the value contract's declared bound, when there is one
    declared_reason: str | None


@dataclass
class PolicyView:
    rounding: str
    subnormals: str
    contraction: str
    reduction: str
    label: str


@dataclass
class CapsuleInfo:
    """The capsule record as an evidence record (or the registry) states it."""
    name: str
    op: str
    provider: str
    device: str
    trust_level: str
    supports_forward: bool | None
    vjp_mode: str
    policy: PolicyView
    contracts: list[Contract]
    notes: str


@dataclass
class ErrorModelView:
    direction: str                  # forward | vjp
    model: str                      # the reference kind it applies to: rounded, reduction, ...
    kind: str
    label: str
    source: str                     # derived | declared
    reason: str
    ulps: Number
    signed_zero: bool | None
    flush_allowed: bool | None
    order: str | None


@dataclass
class ClassCases:
    name: str                       # the generator class
    run: int
    failed: int
    skipped: int
    harness_errors: int = 0
    fixed: bool = False             # the `edges` class: one fixed set, the same for every seed


@dataclass
class Sizes:
    """How large the cases were (schema_version 2): cases per input-element bucket."""
    buckets: list[tuple[str, int]]
    max_elements: int | None
    max_terms: int | None
    elements_total: int | None


@dataclass
class HarnessError:
    """A case on which the harness's own code raised (schema_version 2): no kernel verdict."""
    case_class: str
    index: int | None
    where: str
    error: str
    traceback: str


@dataclass
class StatsView:
    direction: str                  # forward | vjp
    elements: int
    worst_ratio: Number
    worst_ulps: Number
    percentiles: list[tuple[str, Number]]
    histogram: list[tuple[str, int]]    # ulp bucket label -> element count, in record order
    worst_ratio_failing: Number = None  # over failing elements (schema_version 2; None: absent
                                        # or no element failed)


@dataclass
class DirectionWorst:
    """The worst error/bound of one direction (forward or vjp), failing elements included."""
    direction: str
    within: Number                  # over elements within their bound (the record's statistics)
    failing: Number                 # over failing elements
    failing_from: str | None        # "record" (worst_ratio_failing: exact), "counterexamples"
                                    # (the recorded ones only: a lower bound), None: no failure
    worst: Number                   # "nan" / "inf" where a NaN or inf mismatch failed, whatever
                                    # the finite ratios are (those leave mismatches out)
    mismatches: list[tuple[str, int]] = field(default_factory=list)     # ("NaN mismatch", 8)

    @property
    def lower_bound(self) -> bool:
        return self.failing_from == "counterexamples" and self.failing is not None


@dataclass
class FailureView:
    output: str
    element: list[int]
    reason: str
    expected: str                   # hex bits
    got: str
    expected_value: Number
    got_value: Number
    exact: Number
    error: Number
    bound: Number
    ulps: Number
    ratio: Number                   # error / bound ("nan" when the error is NaN, "inf" when the
                                    # bound is zero or the error infinite)
    inputs: list[tuple[str, list[str]]]     # input name -> float32 bits in hex


@dataclass
class CaseRef:
    case_class: str
    index: int
    seed: int
    summary: str
    note: str


@dataclass
class Counterexample:
    case: CaseRef
    failures: list[FailureView]
    shrunk: CaseRef | None
    shrunk_failures: list[FailureView]
    replay_command: str | None
    replay_file: str | None
    reasons: list[str] = field(default_factory=list)   # the failure reasons it stands for
    reproduce_command: str | None = None   # a peer's (aten.*, xla.*): `reproduce` its replay


@dataclass
class Freshness:
    state: str                      # fresh | stale | unknown
    recorded: str | None            # the record's fingerprint
    current: str | None             # what it was compared with
    source: str                     # where `current` came from
    why: str
    recomputed: bool = False        # `current` is this checkout's own build fingerprint


@dataclass
class Determinism:
    label: str                      # short text for the index cell
    ok: bool | None                 # None: nothing observed
    source: str                     # determinism suite | campaign repeat runs
    detail: str                     # the numbers behind the label


@dataclass
class TestCounts:
    passed: int
    failed: int
    skipped: int


@dataclass
class TrustExport:
    """A directory's trust.json (conformance/trust.py), as the index shows it."""
    file: str
    version: int
    device: str
    generated: str | None
    commit: str | None
    tree: str | None                # "tree clean", "checkout digest <sha>", ... (version 2)
    gpu: str | None
    suite_line: str                 # "test suite: 489 passed, 0 failed, 183 skipped (...)"
    suite_ok: bool | None
    guards_line: str
    guards_ok: bool | None


@dataclass
class Directory:
    """One evidence directory (a column of the index's evidence rows)."""
    label: str
    path: str
    slug: str
    devices: list[str]
    gpu: str | None
    git_commits: list[str]
    records: int
    trust: TrustExport | None
    unusable: list[Unusable] = field(default_factory=list)


@dataclass
class EvidenceView:
    """One capsule's evidence record in one directory."""
    directory: Directory
    capsule: CapsuleInfo
    status: str
    message: str | None
    cases_total: int
    cases_failed: int
    cases_skipped: int
    by_class: list[ClassCases]
    skipped_notes: list[str]
    error_models: list[ErrorModelView]
    stats: list[StatsView]
    observed: list[tuple[str, object]]
    identity: list[tuple[str, int]]
    vjp_checked: bool
    failure_reasons: list[tuple[str, int]]
    counterexamples: list[Counterexample]
    settings: list[tuple[str, object]]
    timing_seconds: Number
    cases_per_second: Number
    environment: list[tuple[str, object]]
    fingerprint_value: str | None
    fingerprint_method: str | None
    fingerprint_inputs: list[str]
    plugin: str | None
    created: str | None
    freshness: Freshness
    earned: str | None
    earned_why: str
    determinism: Determinism
    vjp_status: str                 # n/a | checked | failed | not checked | not run
    stats_worst: Number             # worst error/bound over elements within their bound (the
                                    # campaign's statistics leave failing elements out)
    failure_worst: Number           # worst error/bound over failing elements: the record's
                                    # worst_ratio_failing, else the recorded counterexamples
    worst_ratio: Number             # the worse of the two
    worst_by_direction: list[DirectionWorst] = field(default_factory=list)
    schema_version: int = 1
    record_file: str = ""
    earned_note: str | None = None  # shown in the earned cell itself (not only on hover)
    status_hint: str | None = None  # what to do about this status
    next_step: tuple | None = None  # (what to do about this record, a command or None)
    cases_harness_errors: int = 0
    sizes: Sizes | None = None
    harness_errors: list[HarnessError] = field(default_factory=list)
    capsule_tests: TestCounts | None = None     # this capsule's tests, from the trust export
    elements_per_second: Number = None
    telling: Counterexample | None = None   # the counterexample a failing page leads with
    reasons_explained: list[tuple[str, int, str]] = field(default_factory=list)
                                            # (failure reason, count, what it means)
    rerun: str | None = None        # the command that reruns this record's capsule here
    differences: list[tuple[str, str, int]] = field(default_factory=list)
                                    # a peer audit's (clause, convention | undocumented, cases):
                                    # elements that kept the peer's own rule, not failures

    @property
    def mismatches(self) -> list[tuple[str, str, int]]:
        """(direction, "NaN mismatch" | "inf mismatch", count) over both directions."""
        return [(d.direction, label, n) for d in self.worst_by_direction
                for label, n in d.mismatches]

    @property
    def failing_summary(self) -> Number:
        """The worst over failing elements as the pages state it: NaN and inf mismatches by
        name and count (no ratio measures them), then the worst finite ratio."""
        if not self.mismatches:
            return self.failure_worst
        text = ", ".join(f"{label} × {n} ({d})" for d, label, n in self.mismatches)
        finite = worst(d.failing for d in self.worst_by_direction
                       if isinstance(d.failing, (int, float)))
        if finite is None:
            return text
        return f"{text}; finite: {finite:.4g}" if isinstance(finite, float) else \
            f"{text}; finite: {finite}"

    @property
    def worst_is_lower_bound(self) -> bool:
        """Counterexamples hold some failures, not all: their worst bounds the true one below."""
        return any(d.lower_bound for d in self.worst_by_direction)

    @property
    def failing(self) -> bool:
        return self.status in FAILING_STATUSES


@dataclass
class Cell:
    """A capsule in one directory: evidence, or why there is none."""
    directory: Directory
    evidence: EvidenceView | None
    absent: str | None              # "no evidence" (the directory audits this device) or None
    applicable: bool                # False: the directory holds evidence for other devices only
    unusable: Unusable | None = None    # the capsule's record file is there but unusable
    command: str | None = None      # an absent record: the command that makes it here


@dataclass
class CapsuleRow:
    info: CapsuleInfo
    page: str
    anchor: str
    registered: bool
    cells: list[Cell]
    outcome: str                    # PASSING | FAILING | UNAUDITED
    stale: bool
    info_differs: list[str]         # directories whose capsule record differs from `info`

    @property
    def evidence(self) -> list[EvidenceView]:
        return [c.evidence for c in self.cells if c.evidence is not None]

    @property
    def audited(self) -> bool:
        """Some directory holds a record of it (usable or not): a row of the index's table."""
        return any(c.evidence is not None or c.unusable is not None for c in self.cells)

    @property
    def shown_cells(self) -> list[Cell]:
        """The cells the index shows: directories that audit this capsule's device or hold a
        record of it."""
        return [c for c in self.cells if c.applicable]


@dataclass
class OpGroup:
    op: str
    anchor: str
    rows: list[CapsuleRow]


@dataclass
class Counts:
    """The headline: the capsules the directories hold records of, nothing else."""
    capsules: int
    passing: int
    failing: int
    stale: int
    unaudited: int                  # a record without a kernel verdict
    unknown: int = 0                # records whose freshness this machine cannot tell
    without_evidence: int = 0       # registered capsules of audited devices with no record
    other_devices: int = 0          # registered capsules of devices no directory audits


@dataclass
class SuiteRow:
    passed: bool
    cells: list[object]
    link: str | None = None         # a capsule page the first cell links to


@dataclass
class SuiteSection:
    """One suite record from one directory: a summary, a breakdown (name, tried, held) and the
    suite's own outcome rows, failures first."""
    directory: Directory
    passed: bool
    summary: list[tuple[str, object]]
    breakdown_title: str
    breakdown: list[tuple[str, int, int]]
    columns: list[str]
    rows: list[SuiteRow]


@dataclass
class SuitePage:
    suite: str                      # guards | allocator-cap | determinism
    title: str
    page: str
    what: str                       # one paragraph on what the suite checks
    sections: list[SuiteSection]

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.sections)


@dataclass
class Report:
    directories: list[Directory]
    groups: list[OpGroup]
    counts: Counts
    suites: list[SuitePage]
    peers: object = None            # reports.peers.PeersPage, when aten.* evidence is there
    exhaustive: object = None       # reports.exhaustive.ExhaustivePage, when sweeps are there
    lowp: object = None             # reports.lowp.LowpPage, when 16-bit records are there
    devices: object = None          # reports.devices.DevicesPage, when a Dask run keyed devices
    flags: object = None            # reports.flags.FlagsPage, when a flag matrix is there
    gpus: object = None             # reports.gpus.GpuMatrixPage, with two GPU directories or more

    @property
    def rows(self) -> list[CapsuleRow]:
        return [r for g in self.groups for r in g.rows]

    @property
    def shown_groups(self) -> list[OpGroup]:
        """The op groups with the rows the directories hold records of (the index's table): what
        they audited, not every capsule the registry knows."""
        groups = [OpGroup(g.op, g.anchor, [r for r in g.rows if r.audited])
                  for g in self.groups]
        return [g for g in groups if g.rows]

    @property
    def without_evidence(self) -> list[tuple[str, list[CapsuleRow]]]:
        """(device, capsules) of devices some directory audits but without a record in any:
        one click away (a folded list), never rows of the table."""
        return _by_device(r for r in self.rows if r.shown_cells and not r.audited)

    @property
    def folded(self) -> list[tuple[str, list[CapsuleRow]]]:
        """(device, capsules) that no directory of this report covers: listed, not tabulated."""
        return _by_device(r for r in self.rows if not r.shown_cells)

    @property
    def unusable(self) -> list[Unusable]:
        """Every file of every directory the report could not use."""
        return [u for d in self.directories for u in d.unusable]


def _by_device(rows) -> list[tuple[str, list[CapsuleRow]]]:
    by_device: dict[str, list[CapsuleRow]] = {}
    for r in rows:
        by_device.setdefault(r.info.device, []).append(r)
    return sorted(by_device.items())


def worst(values) -> object:
    """The worst of several error/bound ratios: "nan" over "inf" over the largest number."""
    vals = [v for v in values if v is not None]
    for text in ("nan", "inf"):
        if text in vals:
            return text
    nums = [v for v in vals if isinstance(v, (int, float))]
    return max(nums) if nums else None
