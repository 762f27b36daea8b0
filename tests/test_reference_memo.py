"""conformance/references/memo.py: a judge process remembers the references it computed, keyed by
the exact bytes of every input and every parameter; a hit is a copy of the same answer, anything
that differs in one bit is computed again, a refusal is never remembered."""
import numpy as np
import pytest

from conformance.references import get as plain
from conformance.references._common import ReferenceInputError
from conformance.references.memo import STORE, _Store, get


@pytest.fixture(autouse=True)
def empty_store():
    STORE.clear()
    yield
    STORE.clear()


def test_a_hit_is_a_copy_of_the_same_answer_and_mutating_it_changes_nothing():
    x = np.array([[1.0, -2.0, 3.5]], dtype=np.float32)
    first = get("softmax").forward((x,), axis=-1)
    first.value[0, 0] = 99.0     # a caller that writes into its answer
    again = get("softmax").forward((x,), axis=-1)
    want = plain("softmax").forward((x,), axis=-1)
    assert (STORE.hits, STORE.misses) == (1, 1)
    np.testing.assert_array_equal(again.value, want.value)
    np.testing.assert_array_equal(again.exact, want.exact)
    assert again is not first and again.value[0, 0] != 99.0


def test_one_bit_of_an_input_or_a_parameter_is_another_question():
    ref = get("exp")
    ref.forward((np.array([0.0], dtype=np.float32),))
    minus = ref.forward((np.array([-0.0], dtype=np.float32),))   # another bit pattern
    ref.forward((np.array([0.0, 0.0], dtype=np.float32),))         # another shape
    assert STORE.misses == 3 and STORE.hits == 0
    assert minus.value[0] == 1.0
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    rows, cols = get("softmax").forward((x,), axis=-1), get("softmax").forward((x,), axis=0)
    assert STORE.hits == 0
    assert not np.array_equal(rows.value, cols.value)


def test_a_0d_input_and_a_1_element_one_of_the_same_value_are_two_questions():
    # the key once came from np.ascontiguousarray, which makes 0-d arrays 1-d: a campaign seed
    # that drew softplus(f32[1]) = 1.0 and then the 0-d case 1.0 flagged the 0-d kernel output
    # `shape-mismatch, expected shape [1]` (a replay, in a fresh process, "passed now")
    one = get("softplus").forward((np.array([1.0], dtype=np.float32),))
    scalar = get("softplus").forward((np.array(1.0, dtype=np.float32),))
    assert (STORE.hits, STORE.misses) == (0, 2)
    assert one.value.shape == (1,) and scalar.value.shape == ()
    # a transposed (non-contiguous) view and its contiguous copy: the same question
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    get("exp").forward((x.T,))
    get("exp").forward((np.ascontiguousarray(x.T),))
    assert STORE.hits == 1


def test_a_vjp_is_keyed_by_its_cotangent_too():
    x = np.array([0.5, -1.5], dtype=np.float32)
    g1, g2 = np.ones(2, np.float32), np.full(2, 2.0, np.float32)
    a = get("exp").vjp((x,), g1)
    b = get("exp").vjp((x,), g2)
    assert STORE.misses == 2 and STORE.hits == 0
    np.testing.assert_array_equal(b[0].value, 2 * a[0].value)
    get("exp").vjp((x,), g1)
    assert STORE.hits == 1


def test_a_refusal_is_raised_every_time_and_never_remembered():
    bad = (np.array([1, 2], dtype=np.int32),)
    for _ in range(2):
        with pytest.raises(ReferenceInputError):
            get("exp").forward(bad)
    assert len(STORE.entries) == 0
    assert STORE.misses == 2


def test_an_argument_without_an_exact_key_goes_to_the_reference_every_time():
    calls = []

    def forward(inputs, **params):
        calls.append(params)
        return len(calls)

    store = _Store(1 << 20)
    assert store.call("m", "forward", forward, ((),), {"how": object()}) == 1
    assert store.call("m", "forward", forward, ((),), {"how": object()}) == 2
    assert (store.hits, store.misses, len(store.entries)) == (0, 0, 0)


def test_the_memory_stays_under_its_bound_dropping_the_least_recently_used():
    store = _Store(3 * 800)
    make = lambda i: np.full(100, float(i))     # 800 bytes an answer
    for i in range(5):
        store.call("m", "forward", make, (i,), {})
    assert store.bytes <= 3 * 800 and len(store.entries) == 3
    store.call("m", "forward", make, (4,), {})       # kept: a hit
    store.call("m", "forward", make, (0,), {})       # dropped: computed again
    assert (store.hits, store.misses) == (1, 6)


def test_a_random_op_without_a_vjp_still_has_none_and_other_attributes_are_the_modules():
    rand = get("rand_uniform")
    assert not hasattr(plain("rand_uniform"), "vjp") and not hasattr(rand, "vjp")
    assert get("exp").__name__ == plain("exp").__name__
    assert get("softmax").forward.__wrapped__ is plain("softmax").forward
