"""Error statistics of a campaign: worst error/bound, an ulp histogram, ratio percentiles, and the
behaviours observed (subnormals preserved or flushed, bitwise repeatability, fixed-order checks)."""
from __future__ import annotations

import numpy as np

# ulp buckets: upper edges, in ulps of the rounded reference
ULP_EDGES = (0.0, 0.5, 1.0, 2.0, 4.0, 16.0, 256.0, float("inf"))
ULP_LABELS = ("0", "(0,0.5]", "(0.5,1]", "(1,2]", "(2,4]", "(4,16]", "(16,256]", ">256")
KEEP = 200_000      # ratios kept per output kind for the percentiles (evenly thinned beyond)


class _Side:
    """Statistics of one output kind (forward values, or gradients)."""

    def __init__(self) -> None:
        self.elements = 0
        self.worst_ratio = 0.0
        self.worst_ratio_failing: float | None = None   # over failing elements: shown apart
        self.worst_ulps = 0.0
        self.hist = np.zeros(len(ULP_LABELS), dtype=np.int64)
        self.ratios: list[np.ndarray] = []
        self.kept = 0

    def add(self, verdict) -> None:
        live = np.isfinite(verdict.ulps) & verdict.ok
        ulps = verdict.ulps[live]
        ratio = verdict.ratio[live & np.isfinite(verdict.ratio)]
        self.elements += int(verdict.ok.size)
        bad = ~verdict.ok & np.isfinite(verdict.ratio)
        if np.any(bad):
            worst = float(verdict.ratio[bad].max())
            self.worst_ratio_failing = max(self.worst_ratio_failing or 0.0, worst)
        if ratio.size:
            self.worst_ratio = max(self.worst_ratio, float(ratio.max()))
        if ulps.size:
            self.worst_ulps = max(self.worst_ulps, float(ulps.max()))
        idx = np.searchsorted(np.asarray(ULP_EDGES), ulps, side="left")
        self.hist += np.bincount(np.minimum(idx, len(ULP_LABELS) - 1),
                                 minlength=len(ULP_LABELS))
        if ratio.size and self.kept < KEEP:
            take = ratio.reshape(-1)[: KEEP - self.kept]
            self.ratios.append(take)
            self.kept += take.size

    def to_json(self) -> dict:
        allr = np.concatenate(self.ratios) if self.ratios else np.zeros(0)
        pct = ({f"p{p}": float(np.percentile(allr, p)) for p in (50, 90, 99)}
               if allr.size else {"p50": None, "p90": None, "p99": None})
        return {"elements": self.elements, "worst_ratio": self.worst_ratio,
                "worst_ratio_failing": self.worst_ratio_failing,
                "worst_ulps": self.worst_ulps, "percentiles": pct,
                "ulp_histogram": dict(zip(ULP_LABELS, (int(x) for x in self.hist)))}


class Stats:
    def __init__(self) -> None:
        self.fwd = _Side()
        self.vjp = _Side()
        self.vjp_cases = 0
        self.sub = {"subnormal_results": 0, "subnormals_flushed": 0, "subnormals_preserved": 0,
                    "overflow_admissible": 0, "inputs_flushed": 0}
        self.repeat_runs = 0
        self.repeat_differ = 0
        self.order_checks = 0

    def add(self, res) -> None:
        if res.fwd is not None:
            self.fwd.add(res.fwd)
            for k in self.sub:
                self.sub[k] += res.fwd.observed.get(k, 0)
        if res.vjp is not None and res.vjp.checks:
            self.vjp_cases += 1
            for c in res.vjp.checks:
                self.vjp.add(c.verdict)
        if res.repeatable is not None:
            self.repeat_runs += 1
            self.repeat_differ += 0 if res.repeatable else 1
        self.order_checks += 1 if res.order_checked else 0

    def to_json(self) -> dict:
        return {"forward": self.fwd.to_json(), "vjp": self.vjp.to_json(),
                "vjp_cases": self.vjp_cases}

    def observed(self, capsule) -> dict:
        s = self.sub
        behaviour = ("none-seen" if not s["subnormal_results"] else
                     "flushed" if not s["subnormals_preserved"] else
                     "preserved" if not s["subnormals_flushed"] else "mixed")
        return {
            **s, "subnormal_behaviour": behaviour,
            "subnormal_policy": capsule.numerical_policy.subnormals.label,
            "repeat_runs": self.repeat_runs, "repeat_differ": self.repeat_differ,
            "bitwise_repeatable": (None if not self.repeat_runs else self.repeat_differ == 0),
            "fixed_order_checks": self.order_checks,
        }
