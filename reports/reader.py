"""Reads one evidence directory for the report: every *.json file is parsed, classified (capsule
record, suite record, trust export) and checked against reports/shapes.py. A file that cannot be
used becomes an Unusable (the file, what is wrong with it, what to do) and is left out, so the
builder and the templates only ever see documents of the shape they read."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from conformance.evidence_dir import DEFAULT_EVIDENCE_ROOT
from conformance.formats import EVIDENCE_SCHEMA, TRUST_FORMAT
from conformance.jsonfile import RefusedFile, check_depth, read_regular
from conformance.record_integrity import contradictions, misnamed, misplacement
from reports import commands
from reports.jsonshape import ShapeMismatch, json_type
from reports.model import Unusable
from reports.shapes import (CAPSULE_RECORD, EVIDENCE_VERSIONS, OTHER_FORMATS, SUITE_RECORDS,
                            TRUST_EXPORTS, TRUST_VERSIONS)

TRUST_FILE = "trust.json"
# What a capsule's record file is called (conformance.evidence.record_path: <name>.json). Only a
# file named like a capsule gets a rerun command; anything else can only be deleted.
CAPSULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+")


class _Unusable(Exception):
    """Raised while reading one file; becomes an Unusable once the directory's device is known
    (the rerun command names it)."""

    def __init__(self, what: str, kind: str, name: str | None = None,
                 device: str | None = None) -> None:
        super().__init__(what)
        self.what, self.kind, self.name, self.device = what, kind, name, device
        self.record: dict | None = None     # the parsed document, when it is an object


class DirectoryData:
    """The usable documents of one directory, and every file that was not usable. `registered`
    (capsule name -> capsule record of this checkout) lets records be checked against the
    capsule of their name; a directory named after a device of those capsules (reports/evidence/
    <device>/) holds that device's records only. A record that contradicts itself or names
    another capsule, op, provider or device than its place is unusable
    (conformance/record_integrity.py), and so is anything but a regular file inside it."""

    def __init__(self, path: Path, registered: dict[str, dict] | None = None) -> None:
        self.path = Path(path)
        self.registered = registered or {}
        devices = {c.get("device") for c in self.registered.values()}
        self.device = self.path.name if self.path.name in devices else None
        self.records: dict[str, dict] = {}          # capsule name -> record
        self.record_files: dict[str, Path] = {}     # capsule name -> the file it came from
        self.suites: dict[str, dict] = {}
        self.trust: dict | None = None
        self.trust_file: Path | None = None
        self.unusable: list[Unusable] = []
        self.unusable_capsules: dict[str, Unusable] = {}    # name -> why its record is unusable
        pending: list[tuple[Path, _Unusable]] = []
        candidates: dict[str, list[tuple[Path, dict]]] = {}
        # trust.json first: another file in the export's format is the second one, not it
        for p in sorted(self.path.glob("*.json"), key=lambda p: (p.name != TRUST_FILE, p.name)):
            if p.is_dir():
                continue
            doc = None
            try:
                doc = _parse(p, self.path)
                self._take(p, doc, candidates)
            except _Unusable as exc:
                # what the file says of its plugin, for a rerun command that can work
                exc.record = doc if isinstance(doc, dict) else None
                pending.append((p, exc))
        for name, found in candidates.items():
            # conformance.evidence.record_path names a record <name>.json: that one is the record
            found.sort(key=lambda pd: pd[0].stem != name)
            (keep, rec), rest = found[0], found[1:]
            if misnamed(rec, keep):     # then so are the rest: none is <name>.json
                for p, r in found:      # the file's name says whose record it should be
                    exc = _Unusable(f"the record names another capsule than its place: "
                                    f"{misnamed(r, p)}", _kind_from_name(p), _capsule_stem(p),
                                    r["capsule"]["device"])
                    exc.record = r
                    pending.append((p, exc))
                continue
            self.records[name], self.record_files[name] = rec, keep
            for p, _ in rest:
                pending.append((p, _Unusable(f"a second record for `{name}` (the report reads "
                                             f"{keep.name})", "duplicate")))
        device = self._sole_device()
        for p, exc in pending:
            u = Unusable(str(p), exc.what, self._todo(p, exc, exc.device or device))
            self.unusable.append(u)
            name = exc.name or (p.stem if exc.kind in ("capsule", "capsule-version") else None)
            if name and name not in self.records:
                self.unusable_capsules.setdefault(name, u)

    # --- classification -------------------------------------------------------------------------

    def _take(self, p: Path, doc, candidates: dict) -> None:
        kind = _kind_from_name(p)
        if not isinstance(doc, dict):
            raise _Unusable(f"is {json_type(doc)}, expected a JSON object", kind)
        if doc.get("format") in OTHER_FORMATS:
            return
        if doc.get("format") == TRUST_FORMAT or kind == "trust":
            self._take_trust(p, doc)
        elif doc.get("schema") == EVIDENCE_SCHEMA or (kind == "capsule" and "suite" not in doc):
            name, rec = _capsule_record(doc)
            if p.stem == name:      # else a second record or a misnamed one: named once all
                self._check_record(name, rec)      # the directory's records are read
            candidates.setdefault(name, []).append((p, rec))
        elif "suite" in doc or kind == "suite":
            suite = doc.get("suite")
            shape = SUITE_RECORDS.get(suite) if isinstance(suite, str) else None
            if shape is None:
                raise _Unusable(f"suite {suite!r} is not one this report shows (known: "
                                f"{', '.join(SUITE_RECORDS)})", "suite" if kind == "suite"
                                else "other")
            try:
                shape.check(doc)
            except ShapeMismatch as exc:
                raise _Unusable(exc.about("the suite record"), "suite") from None
            if suite in self.suites:
                raise _Unusable(f"a second `{suite}` suite record (the report reads the first)",
                                "duplicate")
            self.suites[suite] = doc
        else:
            raise _Unusable("is neither an evidence record, a suite record nor a trust export",
                            "other")

    def _check_record(self, name: str, rec: dict) -> None:
        """_Unusable when the record contradicts itself or names another op, provider or device
        than the capsule of its name and the directory."""
        device = rec["capsule"]["device"]
        wrong = contradictions(rec)
        if wrong:
            raise _Unusable(f"the record contradicts itself: {'; '.join(wrong)}", "capsule", name,
                            device)
        misplaced = misplacement(rec, None, self.registered.get(name), self.device)
        if misplaced:
            raise _Unusable(f"the record names another capsule than its place: "
                            f"{'; '.join(misplaced)}", "capsule", name, self.device or device)

    def _take_trust(self, p: Path, doc: dict) -> None:
        device = doc.get("device") if isinstance(doc.get("device"), str) else None
        if doc.get("format") != TRUST_FORMAT:
            raise _Unusable(f"is not a trust export (format {doc.get('format')!r}, expected "
                            f"{TRUST_FORMAT!r})", "trust", device=device)
        version = doc.get("version")
        if isinstance(version, bool) or version not in TRUST_VERSIONS:
            raise _Unusable(f"trust export version {version!r} is not one this report reads "
                            f"({', '.join(map(str, TRUST_VERSIONS))})", "trust-version",
                            device=device)
        try:
            TRUST_EXPORTS[version].check(doc)
        except ShapeMismatch as exc:
            raise _Unusable(exc.about("the trust export"), "trust", device=device) from None
        if self.trust is not None:
            raise _Unusable(f"a second trust export (the report reads {self.trust_file.name})",
                            "duplicate")
        self.trust, self.trust_file = doc, p

    def _sole_device(self) -> str | None:
        devices = {r["capsule"]["device"] for r in self.records.values()}
        devices |= {s["device"] for s in self.suites.values() if isinstance(s.get("device"), str)}
        if self.trust is not None:
            devices.add(self.trust["device"])
        return devices.pop() if len(devices) == 1 else None

    # --- what to do -----------------------------------------------------------------------------

    def _flags(self, device: str | None) -> str:
        """--device (when known), and --evidence-dir where it differs from the default."""
        if device:
            return commands.flags(device, self.path)
        return f" --evidence-dir {shlex.quote(str(self.path))}"

    def _todo(self, p: Path, exc: _Unusable, device: str | None) -> str:
        name = exc.name or p.stem
        if exc.kind in ("capsule", "capsule-version") and CAPSULE_NAME.fullmatch(name):
            rec = exc.record or {}
            plugin, contracts = commands.plugin_of(rec), commands.contracts_of(rec)
            if plugin is None and self.registered and name not in self.registered:
                # not a capsule of this checkout: a plugin's, and `run` needs that plugin
                plugin = commands.PLUGIN_PLACEHOLDER
            known = self.registered.get(name, {}).get("device")
            cmd = "rerun `" + commands.run_command(name, device or known or "DEVICE", self.path,
                                                   plugin, contracts, fresh=True) + "`"
            if plugin == commands.PLUGIN_PLACEHOLDER:
                cmd += " with the plugin that defines it"
            if exc.kind == "capsule-version":
                cmd += (" with this checkout (or read it with the torchlean-conformance that "
                        "wrote it)")
            return cmd
        if exc.kind == "suite" and p.stem.removeprefix("suite-") in SUITE_RECORDS:
            return (f"rerun `torchlean-conformance run --suite {p.stem.removeprefix('suite-')}"
                    f"{self._flags(device)}`, or delete it")
        if exc.kind in ("trust", "trust-version"):
            dev = shlex.quote(device) if device else "DEVICE"
            where = "" if device and self.path == DEFAULT_EVIDENCE_ROOT / device else \
                f" --evidence-dir {shlex.quote(str(self.path))}"
            return (f"rerun `torchlean-conformance export-trust --device {dev}{where} --tests "
                    "JUNIT_XML`, or delete it")
        if exc.kind == "duplicate":
            return "delete it"
        return "delete it, or move it out of the evidence directory"


def _kind_from_name(p: Path) -> str:
    """What a file's name says it should hold, for files whose content cannot say."""
    if p.name == TRUST_FILE:
        return "trust"
    if p.name.startswith("suite-"):
        return "suite"
    return "capsule" if CAPSULE_NAME.fullmatch(p.stem) else "other"


def _capsule_stem(p: Path) -> str | None:
    """The capsule a file's name says it belongs to, if it is named like a record."""
    return p.stem if CAPSULE_NAME.fullmatch(p.stem) else None


def _parse(p: Path, directory: Path):
    """The parsed JSON of a regular file inside `directory` (never a FIFO, device or a link out
    of it: conformance.jsonfile.read_regular), capped in size and nesting depth."""
    try:
        raw = read_regular(p, inside=directory)
    except RefusedFile as exc:
        if exc.not_a_file:      # nothing to rerun: the path itself has to go
            raise _Unusable(str(exc), "not-a-file", _capsule_stem(p)) from None
        raise _Unusable(str(exc), _kind_from_name(p)) from None
    if not raw.strip():
        raise _Unusable("is empty" if not raw else "holds only white space", _kind_from_name(p))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unusable(f"is not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                        _kind_from_name(p)) from None
    try:
        check_depth(text)
        return json.loads(text)
    except RefusedFile as exc:
        raise _Unusable(str(exc), _kind_from_name(p)) from None
    except json.JSONDecodeError as exc:
        # json's messages may end in "at" ("Unterminated string starting at"): one "at" here
        msg = exc.msg[:-3] if exc.msg.endswith(" at") else exc.msg
        raise _Unusable(f"is not valid JSON ({msg} at line {exc.lineno} column {exc.colno}; "
                        "cut short or damaged)", _kind_from_name(p)) from None
    except RecursionError:
        raise _Unusable("is nested too deeply to read", _kind_from_name(p)) from None


def _capsule_record(doc: dict) -> tuple[str, dict]:
    """(capsule name, record) for a record of a version this report reads, whole."""
    cap = doc.get("capsule")
    name = cap.get("name") if isinstance(cap, dict) and isinstance(cap.get("name"), str) and \
        cap.get("name") else None
    device = cap.get("device") if isinstance(cap, dict) and isinstance(cap.get("device"), str) \
        else None
    if doc.get("schema") != EVIDENCE_SCHEMA:
        raise _Unusable(f"is not an evidence record (schema {doc.get('schema')!r}, expected "
                        f"{EVIDENCE_SCHEMA!r})", "capsule", name, device)
    version = doc.get("schema_version")
    if "schema_version" not in doc:
        raise _Unusable("the evidence record has no `schema_version`", "capsule", name, device)
    if isinstance(version, bool) or version not in EVIDENCE_VERSIONS:
        raise _Unusable(f"schema_version {version!r} is not one this report reads "
                        f"({', '.join(map(str, EVIDENCE_VERSIONS))})", "capsule-version", name,
                        device)
    try:
        CAPSULE_RECORD.check(doc)
    except ShapeMismatch as exc:
        raise _Unusable(exc.about("the evidence record"), "capsule", name, device) from None
    if name is None:
        raise _Unusable("`capsule.name` is empty", "capsule", None, device)
    return name, doc

