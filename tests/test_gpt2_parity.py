"""conformance/gpt2_parity.py: the verdict rules on given losses (CPU), and the tiny preset on
CUDA against the CPU (GPU)."""
from __future__ import annotations

import pytest

from conformance import gpt2_parity
from conformance.gpt2_parity import ENTROPY_FRACTION, REL_BOUND, Parity


def _parity(rel: float, final: float) -> Parity:
    cpu = 5.0
    return Parity("tiny", [(0, cpu, cpu * (1 + rel), rel)], 10, final, 4.0)


def test_within_the_bound_and_learned_passes():
    p = _parity(REL_BOUND / 2, 0.5 * 4.0)
    assert p.first_steps_ok and p.learned and p.ok
    assert "OUT OF BOUND" not in p.table() and "NOT LEARNED" not in p.table()


def test_a_first_step_past_the_bound_fails():
    p = _parity(REL_BOUND * 1.01, 1.0)
    assert not p.first_steps_ok and not p.ok and "OUT OF BOUND" in p.table()


def test_a_loss_not_below_the_entropy_fraction_fails():
    p = _parity(0.0, ENTROPY_FRACTION * 4.0)
    assert p.first_steps_ok and not p.learned and not p.ok and "NOT LEARNED" in p.table()


def test_compare_must_not_exceed_steps():
    with pytest.raises(SystemExit) as err:
        gpt2_parity.main(["--steps", "2", "--compare", "3"])
    assert err.value.code == 2


@pytest.mark.cuda
def test_tiny_on_cuda_tracks_the_cpu_for_the_first_steps():
    result = gpt2_parity.compare("tiny", steps=3, first=3)
    assert [s for s, *_ in result.compared] == [0, 1, 2]
    assert result.first_steps_ok, result.table()
