"""The tag every file the harness writes carries (its `format`, or an evidence record's
`schema`), defined once: writers stamp it, readers (conformance, reports/, the engine's trust
reader) compare against it. conformance/evidence_schema.json, which cannot import, repeats the
evidence tag; tests/test_facts_once.py holds the two equal."""
from __future__ import annotations

# The engine reads trust exports (`--require-evidence`) and never imports the harness, so that
# tag lives in engine/earned_trust.py; it is named here with the others.
from engine.earned_trust import TRUST_FORMAT

EVIDENCE_SCHEMA = "torchlean-conformance-evidence"        # a capsule's or a suite's record
EXHAUSTIVE_FORMAT = "torchlean-conformance-exhaustive"    # an exhaustive sweep's record
FLAG_MATRIX_FORMAT = "torchlean-conformance-flag-matrix"  # the compile-flag matrix
REPLAY_FORMAT = "torchlean-conformance-replay"            # a shrunk counterexample
MANIFEST_FORMAT = "torchlean-test-manifest"               # a pytest run's manifest
BENCH_FORMAT = "torchlean-bench-kernels"                  # benchmarks/bench_kernels.py --json
LOWP_FORMAT = "torchlean-conformance-lowp"                # a 16-bit kernel's sweep or audit
LOWP_TRUST_FORMAT = "torchlean-conformance-lowp-trust"    # export-trust --lowp: trust-lowp.json
ULP_TABLE_FORMAT = "torchlean-conformance-ulp-table"      # ulp-table: ulp-table.json

__all__ = ["TRUST_FORMAT", "EVIDENCE_SCHEMA", "EXHAUSTIVE_FORMAT", "FLAG_MATRIX_FORMAT",
           "REPLAY_FORMAT", "MANIFEST_FORMAT", "BENCH_FORMAT", "LOWP_FORMAT", "LOWP_TRUST_FORMAT",
           "ULP_TABLE_FORMAT"]
