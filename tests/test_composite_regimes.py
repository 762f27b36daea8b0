"""The regimes issue 35's classes 6 and 7 ask the case stream to reach, drawn as stated: the
cancellation class drives each composite to its small output (confident cross-entropy rows, a
dominating softmax entry, the far tails of softplus, sigmoid and gelu), and masks reach past the
first 64-row tile (64k + r rows, r > 1) under causal and random masks, in the fixed edge set (every
seed) and the masks class; rows of one entry hold NaN, +inf and -inf."""
import numpy as np
import pytest

from conformance import edges, generators as G, samplers
from conformance.families import reduction, softmax
from engine.types import BackendOp as Op, RuntimeEntry as Entry

SEEDS, CASES = range(4), range(4)


def _past_first_tile(t: int) -> bool:
    return t > samplers.TILE_ROWS and t % samplers.TILE_ROWS >= 2


# --- class 6: small outputs --------------------------------------------------------------------

def test_cross_entropy_cancellation_rows_are_confident_in_their_case_band():
    for seed in SEEDS:
        for index in CASES:
            case = G.draw_case(Entry.cross_entropy, seed, "cancellation", index)
            x, t = case.inputs[0].astype(np.float64), case.params["targets"]
            assert x.shape[1] >= 2
            rows = np.arange(x.shape[0])
            others = np.where(np.arange(x.shape[1]) == t[:, None], -np.inf, x).max(axis=1)
            margin = x[rows, t] - others
            lo, hi = reduction.CONFIDENT_MARGINS[index % 2]
            assert np.all((margin >= lo - 1e-4) & (margin <= hi + 1e-4)), (seed, index, margin)


@pytest.mark.parametrize("op", [Op.softmax, Op.log_softmax, Op.hard_masked_softmax],
                         ids=lambda o: o.label)
def test_softmax_cancellation_rows_have_one_dominating_participant(op):
    for seed in SEEDS:
        for index in (1, 3):
            case = G.draw_case(op, seed, "cancellation", index)
            a = case.inputs[0].astype(np.float64)
            axis = case.params["axis"] % a.ndim
            assert a.shape[axis] >= 2
            mask = case.params.get("mask")
            part = np.ones(a.shape, bool) if mask is None else np.asarray(mask, bool)
            rows = np.moveaxis(a, axis, -1).reshape(-1, a.shape[axis])
            prow = np.moveaxis(part, axis, -1).reshape(rows.shape)
            lo, _ = softmax.DOMINANT_MARGINS[index // 2 % 2]
            for row, p in zip(rows, prow):
                if p.sum() < 2:
                    continue
                top = np.sort(row[p])
                assert top[-1] - top[-2] >= lo - 1e-4, (seed, index, top[-2:])


@pytest.mark.parametrize("op,lo,hi,both", [(Op.softplus, 5, 105, False),
                                           (Op.sigmoid, 5, 105, True), (Op.gelu, 3, 11, False)],
                         ids=lambda v: getattr(v, "label", str(v)))
def test_elementwise_cancellation_cases_reach_the_far_tail(op, lo, hi, both):
    for seed in SEEDS:
        for index in CASES:
            a = G.draw_case(op, seed, "cancellation", index).inputs[0].reshape(-1)
            tail = (np.abs(a) >= lo - 1e-3) & (np.abs(a) <= hi + 1e-3) & ((a < 0) | both)
            assert tail[0] and tail[np.arange(a.size) % 4 != 3].all(), (seed, index, a[:4])
    if both:
        draws = np.concatenate([G.draw_case(op, s, "cancellation", i).inputs[0].reshape(-1)
                                for s in SEEDS for i in CASES])
        assert (draws < -lo).any() and (draws > lo).any()     # near 0 and near 1


def test_bias_gelu_cancellation_cases_sit_in_gelus_negative_tail():
    for seed in SEEDS:
        for index in CASES:
            x, b = G.draw_case(Entry.bias_gelu, seed, "cancellation", index).inputs
            s = (x + b).astype(np.float64).reshape(-1)
            assert np.mean(s < -2.0) >= 0.5, (seed, index)


# --- class 7: masks past the first tile, length-1 rows --------------------------------------------

def test_causal_masks_past_the_first_tile_are_in_every_attention_edge_set():
    heads = G.edge_set(Entry.attention_heads)
    causal_t = {e.shapes[0][1] for e in heads if dict(e.params)["causal"]}
    assert len({t % 64 for t in causal_t if _past_first_tile(t)}) >= 3, causal_t
    for op in (Op.scaled_dot_product_attention, Op.hard_masked_softmax):
        causal, other = set(), set()
        for i in range(len(G.edge_set(op))):
            case = G.draw_case(op, 0, G.EDGES, i)
            mask = case.params.get("mask")
            if mask is None or mask.ndim < 2 or mask.all() or not _past_first_tile(
                    mask.shape[-2]):
                continue
            tri = np.tril(np.ones(mask.shape[-2:], bool))
            square = mask.shape[-1] == mask.shape[-2]
            if square and np.array_equal(mask, np.broadcast_to(tri, mask.shape)):
                causal.add(mask.shape[-2])
            else:
                other.add(mask.shape[-2])
        assert causal and other, (op.label, causal, other)


def test_the_masks_class_reaches_past_the_first_tile():
    for op in (Op.scaled_dot_product_attention, Entry.attention_heads, Op.hard_masked_softmax):
        rows = []
        for seed in range(6):
            for index in range(2):
                case = G.draw_case(op, seed, "masks", index)
                rows.append(case.inputs[0].shape[-2] if op is not Op.hard_masked_softmax
                            else case.inputs[0].shape[0])
        assert sum(map(_past_first_tile, rows)) >= 3, (op.label, rows)


def _specials_in_single_entry_rows(op) -> set:
    """The special values at input 0 of the op's edge cases whose rows hold one participant."""
    seen = set()
    for i in range(len(G.edge_set(op))):
        e = G.edge(op, i)
        if e.fill != edges.SPECIALS:
            continue
        x = G.draw_case(op, 0, G.EDGES, i).inputs[0]
        seen |= {"nan" if np.isnan(v) else "+inf" if v > 0 else "-inf"
                 for v in x.reshape(-1) if not np.isfinite(v)}
    return seen


@pytest.mark.parametrize("op", [Op.softmax, Op.log_softmax, Op.hard_masked_softmax,
                                Op.scaled_dot_product_attention, Entry.attention_heads],
                         ids=lambda o: o.label)
def test_rows_of_one_participant_hold_every_special_value(op):
    assert _specials_in_single_entry_rows(op) == {"nan", "+inf", "-inf"}


def test_causal_mask_kind_is_the_triangle_over_the_last_two_axes():
    mask = edges.draw_mask(edges.CAUSAL, (2, 5, 5), -1, np.random.default_rng(0))
    assert mask.shape == (2, 5, 5) and np.array_equal(mask[1], np.tril(np.ones((5, 5), bool)))
    cycled = samplers.cycle_specials(np.ones((2, 4), np.float32)).reshape(-1)
    assert np.isnan(cycled[[0, 4]]).all() and (cycled[[1, 5]] == np.inf).all()
    assert (cycled[[2, 6]] == -np.inf).all() and (cycled[[3, 7]] == 1).all()
