"""Why a record failed, at a glance: what each failure reason means, which of them are NaN or inf
mismatches (no error/bound ratio can say those: the campaign's ratios leave them out), and which
counterexample a failing page leads with."""
from __future__ import annotations

from conformance.console import mismatches as console_mismatches, reason_rank
from reports.model import Counterexample

# What each of the campaign's failure reasons (conformance/error_models.py, kernel_call.py,
# vjp.py, ...) means. A `vjp-` reason means the same of a gradient. Their order, on a page as on
# the console, is the console's (conformance/console.py, REASON_ORDER): no usable result first,
# then wrong special values and broken contracts, then values merely too far from the exact one.
MEANINGS = {
    "nan-mismatch": "a NaN where the reference is a number, or a number where it is NaN",
    "inf-mismatch": "an infinity where the reference is finite, or the reverse",
    "raised": "the kernel raised",
    "wrong-type": "a result that is not a float32 array (another dtype, or no array)",
    "shape-mismatch": "an output of the wrong shape",
    "poison-in-output": "output elements the kernel never wrote",
    "input-mutated": "the kernel wrote into its inputs",
    "exceeds-bound": "an error above the bound its policy allows",
    "not-correctly-rounded": "not the correctly rounded result",
    "flushed-subnormal": "a subnormal result flushed to zero against its policy",
    "signed-zero": "a zero of the wrong sign",
    "order-mismatch": "not the bits of the reduction order it declares",
    "unchecked-order-claim": "a fixed order no program can check",
    "param-not-rounded": "a float parameter used without rounding it to float32",
    "not-bitwise": "not bit-exact where the policy requires it",
    "not-repeatable": "other bits when run again",
    "identity": "the inner-product identity <t, vjp(c)> = <jvp(t), c> fails",
}
def _base(reason: str) -> str:
    return reason.removeprefix("vjp-")


def meaning(reason: str) -> str:
    """One line on what a failure reason says; a gradient's reason says it of the gradient."""
    text = MEANINGS.get(_base(reason))
    if text is None:
        return "see the counterexamples"
    return f"gradient: {text}" if reason.startswith("vjp-") else text


def explained(failure_reasons: list[tuple[str, int]]) -> list[tuple[str, int, str]]:
    """(reason, count, meaning), the most telling first (then the most frequent)."""
    return [(r, n, meaning(r)) for r, n in sorted(failure_reasons,
                                                  key=lambda rn: (reason_rank(rn[0]), -rn[1]))]


def mismatches(failure_reasons: list[tuple[str, int]], direction: str) -> list[tuple[str, int]]:
    """("NaN mismatch" | "inf mismatch", count) of one direction: what a ratio cannot show (the
    console's own naming, conformance/console.py)."""
    return console_mismatches(dict(failure_reasons), direction)


def telling(counterexamples: list[Counterexample]) -> Counterexample | None:
    """The counterexample a failing page leads with: the one that shows the most telling reason,
    then the one that shows most reasons, then the record's first; one that can be replayed
    before one that cannot."""
    def key(ce: Counterexample):
        best = min((reason_rank(r) for r in ce.reasons), default=(3, 0, "", True))
        return ce.replay_command is None, best, -len(ce.reasons)
    return min(counterexamples, key=key, default=None)
