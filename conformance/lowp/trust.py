"""The trust a 16-bit kernel earned from its `lowp` records (`torchlean-conformance export-trust
--lowp DIR`, <DIR>/trust-lowp.json), by the rules of TRUST_BOUNDARIES.md for capsules, in the
16-bit kernels' terms:

- `verified`: an exhaustive sweep (a unary kernel's 2^16 inputs, and its VJP's when it declares
  one; a binary kernel's 2^32 pairs) passed, judged by this harness, for the plugin's source as
  it is now, on this machine's GPU, driver and CUDA runtime when the record names a GPU;
- `fuzzed`: an accumulating kernel's audit on the cases of a run seed passed (every class run,
  its VJP's too when it brings one), or a sample of a binary kernel's pairs (`--pair-stride`),
  with the same conditions;
- a binary kernel's VJP (binary_vjp.py) holds the record to the lesser of the two: `verified` needs
  every pass of its op's complete (add, sub: every g; mul: all 2^32 (g, b) and (g, a)), recounted
  here from the passes' evaluations; max and min's VJP samples g, so it earns `fuzzed` at most;
- an op of the plugin's own, judged against its contract's reference (contracts.py: the plugin's
  word, certified on a sample), earns `verified-against-contract` or `fuzzed-against-contract`,
  never `verified` or `fuzzed`, which name our references; and nothing once the contract's source
  files changed since the record (their digest is in it), or without its certification;
- nothing otherwise, with the reason: a failed or inconsistent record (its status must follow
  from its counts: a record edited to `passed` while it lists failures, counterexamples or a worst
  error over its bound earns nothing), a stale one (another harness, an edited plugin), one
  made on another GPU, or one that passed only under its peer's contract: where a clause
  explained results (the record's `differences`, conformance/lowp/conventions.py) the kernel
  meets its peer's conventions, not TorchLean's, so it earns no trust in TorchLean's terms (as a
  float32 capsule's record, conformance/trust.py); the export lists those differences apart.
Plain data in, a document out: the records are read, never the plugin imported.
"""
from __future__ import annotations

import datetime as _dt
import re
from pathlib import Path

from conformance.formats import LOWP_FORMAT, LOWP_TRUST_FORMAT
from conformance.fingerprint import harness_digest
from conformance.isolation.plugin_files import files_digest, plugin_files
from conformance.jsonfile import read_documents, write_atomic
from conformance.lowp.kernel import ACCUMULATING, BINARY
from conformance.peers.classify import in_words
from conformance.lowp.refs import FUNCTIONS

TRUST_FILE = "trust-lowp.json"     # not lowp-*.json: those are the records
ENV_KEYS = ("gpu", "driver", "cuda_runtime")
PATTERNS = 1 << 16
PAIRS = 1 << 32


def gpu_problem() -> str | None:
    """Why CuPy sees no GPU here, or None when it sees one."""
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None if count > 0 else "CuPy sees 0 devices"


def machine_environment() -> dict:
    """conformance.evidence.environment of this machine: with its GPU where CuPy sees one (a
    16-bit kernel may run there whatever device judges it), else the CPU's."""
    from conformance import evidence
    return evidence.environment("cpu" if gpu_problem() else "cuda")


def read_trust(directory: Path) -> dict | None:
    """The directory's trust-lowp.json, or None when there is none or it is not one."""
    from conformance.jsonfile import UnusableFileError, read_tagged
    path = Path(directory) / TRUST_FILE
    if not path.exists():
        return None
    try:
        return read_tagged(path, "format", LOWP_TRUST_FORMAT, "a 16-bit trust export",
                           "rerun `torchlean-conformance export-trust --lowp DIR`")
    except UnusableFileError:
        return None


def source_digest(spec: str) -> str:
    """The digest of a plugin's source files as the judge reads them (never importing them)."""
    return files_digest(plugin_files(spec))


def _count(v) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def contradictions(rec: dict) -> list[str]:
    """Everything in a `passed` record that says otherwise (empty for an honest one)."""
    out = []
    reasons = {k: v for k, v in (rec.get("failure_reasons") or {}).items() if _count(v)}
    if reasons:
        out.append("failure_reasons lists " + ", ".join(f"`{k}` x{v}" for k, v in
                                                        sorted(reasons.items())))
    if rec.get("counterexamples"):
        out.append(f"{len(rec['counterexamples'])} counterexample(s) are recorded")
    if _count(rec.get("failed")) or _count((rec.get("cases") or {}).get("failed")):
        out.append("its failed count is not 0")
    bound, worst = rec.get("bound_ulps"), rec.get("max_ulps_passing")
    if isinstance(worst, (int, float)) and isinstance(bound, (int, float)) and \
            not isinstance(worst, bool) and worst > bound * (1 + 2.0 ** -40):
        out.append(f"its worst passing error, {worst} ulp, is over its bound of {bound}")
    if isinstance(bound, (int, float)) and bound <= 0.5 and \
            _count(rec.get("not_correctly_rounded")):
        out.append(f"{rec['not_correctly_rounded']} results are not the correctly rounded ones "
                   "its 0.5 ulp bound demands")
    vjp = rec.get("vjp")
    if isinstance(vjp, dict) and (_count(vjp.get("failed")) or vjp.get("failure_reasons") or
                                  _count((vjp.get("cases") or {}).get("failed")) or
                                  vjp.get("counterexamples")):
        out.append("its VJP " + ("audit" if rec.get("op") in ACCUMULATING else "sweep") +
                   " lists failures")
    if isinstance(vjp, dict) and rec.get("op") in BINARY:
        vb, vw = vjp.get("bound_ulps"), vjp.get("max_ulps_passing")
        if isinstance(vb, (int, float)) and isinstance(vw, (int, float)) and \
                not isinstance(vw, bool) and vw > vb * (1 + 2.0 ** -40):
            out.append(f"its VJP's worst passing error, {vw} ulp, is over its bound of {vb}")
        if isinstance(vb, (int, float)) and vb <= 0.5 and _count(vjp.get("not_correctly_rounded")):
            out.append(f"{vjp['not_correctly_rounded']} VJP results are not correctly rounded")
    return out


def _cases_run(cases) -> bool:
    """Whether an audit's case counts say every class ran."""
    cases = cases if isinstance(cases, dict) else {}
    by_class = cases.get("by_class") or {}
    return bool(_count(cases.get("total")) and by_class and isinstance(by_class, dict) and
                all(isinstance(c, dict) and _count(c.get("run")) for c in by_class.values()))


OWN = {"verified": "verified-against-contract", "fuzzed": "fuzzed-against-contract"}


def own_reference(rec: dict) -> dict | None:
    """The contract a record of an op of the plugin's own was judged against (None: one of ours,
    or no contract named)."""
    ref, op = rec.get("reference"), rec.get("op")
    if not isinstance(op, str) or op in BINARY or op in ACCUMULATING or op in FUNCTIONS or \
            not isinstance(ref, dict) or ref.get("by") != "contract" or \
            not isinstance(ref.get("contract"), str):
        return None
    return ref


def _vjp_coverage(op: str, vjp: dict) -> tuple[str | None, str]:
    """(the level a binary VJP's passes can earn, in words what they covered), recounted from
    each pass's evaluations against binary_vjp.PASSES."""
    from conformance.lowp.binary_vjp import PASSES, complete
    done = {p.get("name"): _count(p.get("evaluations")) for p in vjp.get("passes") or []
            if isinstance(p, dict)}
    missing = [p.name for p in PASSES[op] if not done.get(p.name)]
    if missing:
        return None, f"its VJP lacks the pass(es) {', '.join(missing)}"
    words = ", ".join(f"{p.name}: {done[p.name]}" for p in PASSES[op])
    if all(complete(p, done[p.name]) for p in PASSES[op]):
        return "verified", f"its VJP's every value it depends on ({words})"
    return "fuzzed", f"a sample of its VJP's ({words})"


def _coverage(rec: dict) -> tuple[str | None, str]:
    """(the level the record's coverage can earn, in words what it covered)."""
    op = rec.get("op")
    own = own_reference(rec)
    if op in BINARY or own is not None:
        pairs = _count(rec.get("pairs"))
        if rec.get("exhaustive") is True and pairs == PAIRS:
            level, covered = "verified", "all 2^32 input pairs"
        else:
            level, covered = ("fuzzed", f"a sample of {pairs} input pairs") if pairs else \
                (None, "no pairs")
        if own is not None:
            cert = own.get("certification") or {}
            if not _count(cert.get("pairs")):
                return None, "no certification of the contract's reference is recorded"
            return (OWN.get(level), f"{covered}, against the reference of the contract "
                    f"`{own['contract']}` (the plugin's, certified on {cert['pairs']} pairs), "
                    "not ours")
        vjp = rec.get("vjp")
        if level is not None and isinstance(vjp, dict):
            vjp_level, vjp_words = _vjp_coverage(op, vjp)
            level = None if vjp_level is None else max(level, vjp_level,     # the weaker
                                                        key=("verified", "fuzzed").index)
            covered += f" and {vjp_words}"
        return level, covered
    if op in ACCUMULATING:
        cases, vjp = rec.get("cases") or {}, rec.get("vjp")
        if not _cases_run(cases):
            return None, "no case of some class ran"
        seed = (rec.get("run") or {}).get("seed")
        covered = f"{cases['total']} cases of run seed {seed}"
        if vjp is None:
            return "fuzzed", covered
        if not isinstance(vjp, dict) or not _cases_run(vjp.get("cases")):
            return None, "no VJP case of some class ran"
        return "fuzzed", covered + f" and its VJP's {vjp['cases']['total']}"
    if _count(rec.get("patterns")) == PATTERNS:
        return "verified", "all 2^16 inputs" + (" and its VJP's" if rec.get("vjp") else "")
    return None, f"{_count(rec.get('patterns'))} of the 2^16 inputs"


def earned(rec: dict, env: dict, harness: str, digests: dict) -> tuple[str | None, str]:
    """(the level a record earns, None for nothing; why). `digests` maps a plugin spec to its
    source digest now (filled as needed)."""
    if rec.get("status") != "passed":
        return None, f"status `{rec.get('status')}`"
    problems = contradictions(rec)
    if problems:
        return None, "a `passed` record that contradicts itself: " + "; ".join(problems)
    differs = in_words(rec.get("differences"))
    if differs:
        return None, (f"meets {rec['differences'].get('peer', 'its peer')}'s own contract but "
                      f"differs from TorchLean's: {differs}")
    level, covered = _coverage(rec)
    if level is None:
        return None, f"not enough coverage: {covered}"
    if rec.get("harness") != harness:
        return None, "stale: judged by another version of the harness; rerun `lowp`"
    spec = rec.get("plugin")
    if not isinstance(spec, str):
        return None, "the record names no plugin"
    if spec not in digests:
        digests[spec] = source_digest(spec)
    if rec.get("plugin_source") != digests[spec]:
        return None, f"stale: the source of `{spec}` changed since the record; rerun `lowp`"
    own = own_reference(rec)
    if own is not None:
        contract = own["contract"]
        if contract not in digests:
            digests[contract] = source_digest(contract)
        if own.get("contract_source") != digests[contract]:
            return None, (f"stale: the source of the contract `{contract}` changed since the "
                          "record; rerun `lowp`")
    rec_env = rec.get("environment") or {}
    if rec_env.get("gpu") is not None:
        for key in ENV_KEYS:
            if rec_env.get(key) != env.get(key):
                return None, (f"made on another {key.replace('_', ' ')} ({rec_env.get(key)!r}, "
                              f"here {env.get(key)!r})")
    where = f" on {rec_env['gpu']}" if rec_env.get("gpu") else ""
    return level, f"passed over {covered}{where}"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def file_name(*parts: str) -> str:
    """lowp-<part>-<part>....json, each part with what a file name may not hold as `_`: a
    kernel's record (its name) or its replay (its name and reason)."""
    return "lowp-" + "-".join(_UNSAFE.sub("_", p) for p in parts) + ".json"


def read_lowp(directory: Path) -> tuple[list[dict], list[str]]:
    """The `lowp` records of a directory, and a line for each lowp-*.json file that is not one."""
    return read_documents(directory, "lowp-*.json", LOWP_FORMAT,
                          lambda doc: isinstance(doc.get("kernel"), str) and
                          isinstance(doc.get("failure_reasons"), dict),
                          "a 16-bit kernel's record", "torchlean-conformance lowp")


def export_lowp_trust(evidence_dir: Path, env: dict, out_path: Path | None = None) -> dict:
    """Write <evidence_dir>/trust-lowp.json (or `out_path`) for every lowp record there."""
    recs, unusable = read_lowp(Path(evidence_dir))
    harness, digests, kernels = harness_digest(), {}, {}
    for rec in recs:
        level, why = earned(rec, env, harness, digests)
        kernels[str(rec.get("kernel"))] = {"earned": level, "reason": why,
                                           "status": rec.get("status"), "op": rec.get("op"),
                                           "storage": rec.get("storage"),
                                           "differences": in_words(rec.get("differences")),
                                           "record_created": rec.get("created")}
    doc = {"format": LOWP_TRUST_FORMAT,
           "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "environment": {k: env.get(k) for k in ENV_KEYS}, "harness": harness,
           "unusable": unusable, "kernels": kernels}
    write_atomic(Path(out_path) if out_path else Path(evidence_dir) / TRUST_FILE, doc)
    return doc
