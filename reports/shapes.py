"""The structure the report needs from each kind of evidence file, as jsonshape specs: capsule
records (schema_version 1 and 2), suite records, trust exports (version 1 and 2).

These are the fields and JSON types the builder reads, not the writer's whole schema
(conformance/evidence_schema.json): a field the report never reads is not checked, and a field
that version 2 added is checked when present, so a version 1 record reads with it absent.
"""
from __future__ import annotations

from conformance.formats import (BENCH_FORMAT, EVIDENCE_SCHEMA, EXHAUSTIVE_FORMAT,
                                 FLAG_MATRIX_FORMAT, LOWP_FORMAT, LOWP_TRUST_FORMAT,
                                 MANIFEST_FORMAT, REPLAY_FORMAT, TRUST_FORMAT, ULP_TABLE_FORMAT)
from reports.jsonshape import (ANY, BOOL, INT, OPT_BOOL, OPT_INT, OPT_NUMBER, OPT_STRING, STRING,
                               Arr, Obj, Scalar, nullable, string_map)

EVIDENCE_VERSIONS = (1, 2)
TRUST_VERSIONS = (1, 2)
STATUSES = ("passed", "failed", "harness-error", "crashed", "timed-out", "interrupted",
            "unsupported")
TRUST_LABELS = ("verified", "checked", "fuzzed", "trusted-external")
# Harness files that may sit beside evidence and are not the report's to read: no warning.
OTHER_FORMATS = (MANIFEST_FORMAT, REPLAY_FORMAT,
                 BENCH_FORMAT,         # benchmarks/bench_kernels.py --json
                 EXHAUSTIVE_FORMAT,    # reports/exhaustive.py reads those
                 FLAG_MATRIX_FORMAT,   # and reports/flags.py these
                 LOWP_FORMAT,          # and reports/lowp.py these,
                 LOWP_TRUST_FORMAT,    # with the trust export of them
                 ULP_TABLE_FORMAT)     # reports/ulp_table.py, on the exhaustive page

_POLICY = Obj({"rounding": STRING, "subnormals": STRING, "contraction": STRING,
               "reduction": STRING}, {"label": STRING})
_CONTRACT = Obj({}, {"claim": STRING, "summary": STRING, "evidence": STRING,
                     "source_file": OPT_STRING, "native_symbol": OPT_STRING,
                     "declared_bound": nullable(Obj({}, {"ulps": OPT_NUMBER,
                                                         "reason": OPT_STRING,
                                                         "absolute": OPT_NUMBER}))})
CAPSULE = Obj({"name": STRING, "op": STRING, "provider": STRING, "device": STRING,
               "trust_level": STRING, "vjp_mode": STRING, "numerical_policy": _POLICY,
               "contracts": string_map(_CONTRACT)},
              {"supports_forward": OPT_BOOL, "notes": OPT_STRING})

_MODEL = Obj({}, {"kind": STRING, "label": STRING, "source": STRING, "reason": STRING,
                  "ulps": OPT_NUMBER, "signed_zero": OPT_BOOL, "flush_allowed": OPT_BOOL,
                  "order": OPT_STRING})
_ERROR_MODEL = Obj({}, {"forward": string_map(_MODEL), "vjp": string_map(_MODEL)})

_CLASS = Obj({"run": INT, "failed": INT}, {"skipped": INT, "harness_errors": INT})
_SIZES = Obj({}, {"buckets": string_map(INT), "max_elements": OPT_INT, "max_terms": OPT_INT,
                  "elements_total": OPT_INT})
_CASES = Obj({"total": INT, "failed": INT, "skipped": INT, "by_class": string_map(_CLASS)},
             {"skipped_notes": Arr(STRING), "harness_errors": INT, "sizes": nullable(_SIZES)})

_SIDE = Obj({"elements": INT, "worst_ratio": OPT_NUMBER},
            {"worst_ulps": OPT_NUMBER, "percentiles": string_map(OPT_NUMBER),
             "ulp_histogram": string_map(INT), "worst_ratio_failing": OPT_NUMBER})
_STATS = nullable(Obj({}, {"forward": nullable(_SIDE), "vjp": nullable(_SIDE),
                           "vjp_cases": OPT_INT}))

# A failing element's numbers are shown as they are; a failure of the whole output (a wrong
# shape, a kernel that raised) has empty strings there (conformance/campaign.py `_whole`).
_SHOWN = Scalar(("number", "string", "null"))
_FAILURE = Obj({}, {"output": STRING, "element": Arr(INT), "reason": STRING,
                    "expected": STRING, "got": STRING, "expected_value": _SHOWN,
                    "got_value": _SHOWN, "exact": _SHOWN, "error": _SHOWN, "bound": _SHOWN,
                    "ulps": _SHOWN, "inputs": string_map(Arr(STRING))})
_CASE = Obj({"class": STRING, "index": INT, "seed": INT, "summary": STRING},
            {"note": OPT_STRING})
_COUNTEREXAMPLE = Obj({"case": _CASE, "failures": Arr(_FAILURE)},
                      {"shrunk": nullable(_CASE), "shrunk_failures": Arr(_FAILURE),
                       "replay_command": OPT_STRING, "replay_file": OPT_STRING,
                       "reasons": Arr(STRING)})
_HARNESS_ERROR = Obj({}, {"class": STRING, "index": OPT_INT, "where": STRING, "error": STRING,
                          "traceback": OPT_STRING})

# Scalars only where the builder hashes or compares them (the GPU names a column, the commit
# lists a directory); the rest of the environment is shown as it is.
_ENVIRONMENT = Obj({}, {"gpu": OPT_STRING, "git_commit": OPT_STRING})
_FINGERPRINT = Obj({"value": OPT_STRING}, {"method": OPT_STRING, "inputs": Arr(STRING)})

# Every field the writer always writes (conformance.evidence.make_record) is required, in both
# versions: a record without one was not written by it whole (a bare header, a cut file).
CAPSULE_RECORD = Obj(
    {"schema": Scalar(("string",), (EVIDENCE_SCHEMA,)), "schema_version": INT,
     "capsule": CAPSULE, "status": Scalar(("string",), STATUSES), "settings": string_map(ANY),
     "error_model": _ERROR_MODEL, "cases": _CASES, "stats": _STATS,
     "failure_reasons": string_map(INT), "counterexamples": Arr(_COUNTEREXAMPLE),
     "timing": Obj({}, {"seconds": OPT_NUMBER, "cases_per_second": OPT_NUMBER,
                        "elements_per_second": OPT_NUMBER}),
     "environment": _ENVIRONMENT, "fingerprint": _FINGERPRINT, "created": OPT_STRING},
    {"policy_label": STRING, "message": OPT_STRING, "observed": nullable(string_map(ANY)),
     "identity": nullable(string_map(INT)), "vjp_checked": BOOL, "plugin": OPT_STRING,
     "resumed": BOOL, "harness_errors": Arr(_HARNESS_ERROR)})

# --- suite records (conformance/suites.py) ------------------------------------------------------

_GUARD_OUTCOME = Obj({"passed": BOOL}, {"name": OPT_STRING, "check": STRING, "raised": OPT_STRING,
                                        "message": OPT_STRING, "launches": OPT_INT,
                                        "problem": OPT_STRING})
_ALLOC_OUTCOME = Obj({"passed": BOOL}, {"name": OPT_STRING, "value": ANY,
                                        "observed": nullable(Obj({}, {"warnings": Arr(STRING),
                                                                      "released": nullable(
                                                                          string_map(ANY)),
                                                                      "end": nullable(
                                                                          string_map(ANY))},
                                                                 values=ANY)),
                                        "problems": Arr(STRING)})
_MODE = nullable(Obj({}, {"runs": OPT_INT, "differing_runs": OPT_INT, "max_spread": OPT_NUMBER,
                          "bitwise_identical": OPT_BOOL}))
_DET_CAPSULE = Obj({"capsule": STRING, "passed": BOOL},
                   {"op": OPT_STRING, "default": _MODE, "deterministic": _MODE,
                    "within_bound": OPT_BOOL, "worst_ratio": OPT_NUMBER,
                    "problems": Arr(STRING)})
SUITE_RECORDS = {
    "guards": Obj({"suite": STRING, "passed": BOOL, "outcomes": Arr(_GUARD_OUTCOME)},
                  {"device": OPT_STRING, "tried": OPT_INT, "rejected": OPT_INT,
                   "known_op_ok": OPT_BOOL}),
    "allocator-cap": Obj({"suite": STRING, "passed": BOOL, "outcomes": Arr(_ALLOC_OUTCOME)},
                         {"device": OPT_STRING, "backend": OPT_STRING, "held": OPT_INT,
                          "configurations": OPT_INT}),
    "determinism": Obj({"suite": STRING, "passed": BOOL, "capsules": Arr(_DET_CAPSULE)},
                       {"device": OPT_STRING}),
}

# --- trust exports (conformance/trust.py) ---------------------------------------------------------

_EARNED = Scalar(("string", "null"), TRUST_LABELS)
# {} when the export was given no test evidence
_COUNTS = Obj({}, {"passed": INT, "failed": INT, "skipped": INT})
_TRUST_ENTRY_V1 = Obj({"earned": _EARNED, "fingerprint": OPT_STRING},
                      {"declared": OPT_STRING, "reason": OPT_STRING, "status": OPT_STRING})
_TRUST_ENTRY_V2 = Obj({"earned": _EARNED, "fingerprint": OPT_STRING},
                      {"declared": OPT_STRING, "reason": OPT_STRING, "status": OPT_STRING,
                       "record_fingerprint": OPT_STRING, "tests": nullable(_COUNTS)})
_HEAD = {"format": Scalar(("string",), (TRUST_FORMAT,)), "version": INT, "device": STRING,
         "generated": OPT_STRING}
TRUST_EXPORTS = {
    1: Obj({**_HEAD, "capsules": string_map(_TRUST_ENTRY_V1)}, {"test_suite": OPT_STRING}),
    2: Obj({**_HEAD, "capsules": string_map(_TRUST_ENTRY_V2)},
           {"checkout": nullable(Obj({}, {"commit": OPT_STRING, "tree": OPT_STRING,
                                          "digest": OPT_STRING})),
            "environment": nullable(Obj({}, {"gpu": OPT_STRING}, values=ANY)),
            "rules": nullable(string_map(ANY)),
            "test_suite": nullable(Obj({}, {"file": OPT_STRING, "manifest": OPT_STRING,
                                            "ok": OPT_BOOL, "note": OPT_STRING,
                                            "passed": OPT_INT, "failed": OPT_INT,
                                            "skipped": OPT_INT})),
            "guards": nullable(Obj({}, {"status": OPT_STRING, "note": OPT_STRING}))}),
}
