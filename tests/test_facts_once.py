"""Facts once: float32's constants (engine/float32.py), the file tags (conformance/formats.py, the
trust export's in engine/earned_trust.py) and the default evidence root (engine/earned_trust.py)
are each defined in one module and imported everywhere else; a second definition fails here."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np

from conformance import error_terms, evidence, evidence_dir, formats
from engine import earned_trust, float32

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "conformance", "reports", "benchmarks")
# Modules another change is moving into per-family modules (issue 37's op-spec redesign): they
# still define FLT_MAX and the smallest subnormal themselves until that move imports them.
NOT_YET = {"conformance/samplers.py", "conformance/references/fast/certify.py"}


def _python_files():
    for pkg in PACKAGES:
        for f in sorted((REPO / pkg).rglob("*.py")):
            rel = f.relative_to(REPO).as_posix()
            if "__pycache__" not in rel:
                yield rel, f


def test_float32_constants_are_float32s():
    f = np.finfo(np.float32)
    assert float32.FLT_MAX == float(f.max) and float32.FLT_MIN == float(f.tiny)
    assert float32.FLT_TRUE_MIN == float(f.smallest_subnormal)
    assert float32.UNIT_ROUNDOFF == float(f.eps) / 2
    assert np.array(float32.FLT_MAX, np.float32).view(np.uint32) == float32.FLT_MAX_BITS
    # the midpoint between FLT_MAX and 2^128, where round to nearest (ties to even) goes to inf
    assert float32.OVERFLOW_THRESHOLD == float32.FLT_MAX + 2.0 ** 103
    assert np.float32(np.nextafter(float32.OVERFLOW_THRESHOLD, 0)) == np.float32(f.max)
    # the error terms are the same facts under the bounds' names
    assert (error_terms.U, error_terms.TINY, error_terms.OVERFLOW) == \
        (float32.UNIT_ROUNDOFF, float32.FLT_MIN, float32.OVERFLOW_THRESHOLD)
    assert error_terms.HALF_SUB == float32.FLT_TRUE_MIN / 2


def test_no_module_defines_float32s_largest_value_again():
    """`finfo(float32).max` (or its decimal) is read once, in engine/float32.py."""
    bad = []
    for rel, f in _python_files():
        if rel == "engine/float32.py" or rel in NOT_YET:
            continue
        text = f.read_text()
        for needle in ("finfo(np.float32).max", "3.4028234663852886e"):
            if needle in text:
                bad.append(f"{rel}: {needle}")
    assert not bad, "import FLT_MAX from engine/float32.py instead:\n" + "\n".join(bad)


TAGS = {formats.EVIDENCE_SCHEMA, formats.EXHAUSTIVE_FORMAT, formats.FLAG_MATRIX_FORMAT,
        formats.REPLAY_FORMAT, formats.MANIFEST_FORMAT, formats.BENCH_FORMAT,
        earned_trust.TRUST_FORMAT}


def test_every_file_tag_is_written_in_one_module():
    assert len(TAGS) == 7 and formats.TRUST_FORMAT is earned_trust.TRUST_FORMAT
    homes = {"conformance/formats.py", "engine/earned_trust.py"}
    bad = []
    for rel, f in _python_files():
        if rel in homes:
            continue
        for node in ast.walk(ast.parse(f.read_bytes(), rel)):
            if isinstance(node, ast.Constant) and node.value in TAGS:
                bad.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not bad, "import the tag from conformance/formats.py instead:\n" + "\n".join(bad)


def test_the_evidence_schema_file_names_the_same_tag():
    """evidence_schema.json cannot import: it repeats the tag, and must repeat it exactly."""
    schema = json.loads(evidence.SCHEMA_PATH.read_text())
    assert schema["properties"]["schema"]["const"] == formats.EVIDENCE_SCHEMA


def test_one_default_evidence_root():
    assert evidence_dir.DEFAULT_EVIDENCE_ROOT is earned_trust.DEFAULT_EVIDENCE_ROOT
    assert earned_trust.DEFAULT_EVIDENCE_ROOT == Path("reports") / "evidence"
    assert earned_trust.default_trust_path("cuda") == Path("reports/evidence/cuda/trust.json")
    assert evidence_dir.default_evidence_dir("cpu") == Path("reports/evidence/cpu")
    bad = []
    for rel, f in _python_files():
        if rel == "engine/earned_trust.py":
            continue
        for node in ast.walk(ast.parse(f.read_bytes(), rel)):
            # Path("reports") / "evidence", or the path as one string
            if isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant) and \
                    node.right.value == "evidence" and "reports" in ast.unparse(node.left):
                bad.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
            if isinstance(node, ast.Constant) and node.value in ("reports/evidence",
                                                                  "reports/evidence/"):
                bad.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not bad, "import DEFAULT_EVIDENCE_ROOT instead:\n" + "\n".join(bad)
