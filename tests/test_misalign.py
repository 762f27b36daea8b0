"""conformance/misalign.py and the misaligned class: upload(x, xp, offset) gives a view with x's
bits, shape and dtype at that byte offset from an aligned allocation, padding around it, and the
kernel call hands those views (forward and VJP inputs) to the kernel; the class draws cases whose
offsets cover 4, 8 and 12 bytes on every input position."""
from types import SimpleNamespace

import numpy as np
import pytest

from conformance import generators
from conformance.kernel_call import call_forward, call_vjp
from conformance.misalign import ALIGNMENT, OFFSETS, PAD_BITS, MisalignError, offset_of, upload
from engine.types import BackendOp as Op, Device

SHAPES = [(), (0,), (3, 0, 2), (1,), (5,), (2, 3), (1025,)]


def _bits(x):
    return np.asarray(x).view(np.uint32)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("offset", (0, 4, 8, 12, 16, 260))
def test_upload_keeps_bits_shape_and_dtype_at_the_offset(shape, offset):
    rng = np.random.default_rng(len(shape) + offset)
    x = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint32).view(np.float32)   # NaNs too
    v = upload(x, np, offset)
    assert v.shape == x.shape and v.dtype == x.dtype and v.ndim == x.ndim
    assert np.array_equal(_bits(v), _bits(x))
    assert offset_of(v) == offset % ALIGNMENT
    assert v.flags.c_contiguous and v.flags.writeable


def test_the_bytes_around_the_view_hold_the_padding_word():
    x = np.arange(1, 6, dtype=np.float32)
    v = upload(x, np, 12)
    before = np.ndarray((3,), np.uint32, buffer=v.base, offset=v.ctypes.data - 12 -
                        v.base.ctypes.data)
    after = np.ndarray((4,), np.uint32, buffer=v.base, offset=v.ctypes.data + x.nbytes -
                       v.base.ctypes.data)
    assert np.all(before == PAD_BITS) and np.all(after == PAD_BITS)
    assert np.isnan(np.uint32(PAD_BITS).view(np.float32))


def test_uploads_are_fresh_copies():
    x = np.ones(4, np.float32)
    v = upload(x, np, 4)
    v[0] = 7
    assert x[0] == 1


@pytest.mark.parametrize("offset", (-4, 2, 6, 4.0, True, "8"))
def test_an_offset_off_the_element_grid_is_refused_with_what_to_use(offset):
    with pytest.raises(MisalignError, match=r"expected a non-negative multiple of 4 bytes"):
        upload(np.zeros(3, np.float32), np, offset)


def test_only_host_arrays_can_be_uploaded():
    with pytest.raises(MisalignError, match="expected a host NumPy array"):
        upload([1.0, 2.0], np, 4)


def test_the_forward_and_vjp_calls_hand_the_kernel_views_at_the_case_offsets():
    seen = {}

    def forward(a, b):
        seen["forward"] = (offset_of(a), offset_of(b))
        return np.add(a, b)

    def vjp(inputs, out, g):
        seen["vjp"] = tuple(offset_of(x) for x in inputs) + (offset_of(g),)
        return g.copy(), g.copy()

    a, b = np.arange(6, dtype=np.float32), np.ones(6, np.float32)
    out, mutated = call_forward(type("H", (), {"forward": staticmethod(forward)}), Device.cpu,
                                (a, b), {}, False, (12, 8))
    assert mutated == [] and np.array_equal(out, a + b) and seen["forward"] == (12, 8)
    grads, mutated = call_vjp(vjp, Device.cpu, (a, b), out, np.ones(6, np.float32), {}, False,
                              (4, 12))
    assert mutated == [] and seen["vjp"][:2] == (4, 12)
    # without offsets: aligned copies (NumPy's allocations start on 16-byte boundaries)
    call_forward(type("H", (), {"forward": staticmethod(forward)}), Device.cpu, (a, b), {},
                 False)
    assert seen["forward"][0] % 16 == 0 and seen["forward"][1] % 16 == 0


def test_a_write_into_a_misaligned_input_is_still_an_input_mutation():
    def forward(a):
        a[-1] = 0.0
        return a.copy()

    x = np.arange(1, 4, dtype=np.float32)
    _, mutated = call_forward(type("H", (), {"forward": staticmethod(forward)}), Device.cpu,
                              (x,), {}, False, (8,))
    assert [(f.reason, f.output, f.element) for f in mutated] == [
        ("input-mutated", "input[0]", [2])]


def test_offsets_of_another_length_than_the_inputs_are_a_harness_error():
    from conformance.vjp import HarnessStepError
    handler = type("H", (), {"forward": staticmethod(lambda a: a.copy())})
    with pytest.raises(HarnessStepError):
        call_forward(handler, Device.cpu, (np.ones(2, np.float32),), {}, False, (4, 8))


@pytest.mark.parametrize("op", [Op.add, Op.layer_norm, Op.concat, Op.matmul, Op.max_pool])
def test_the_misaligned_class_covers_every_offset_at_every_input_position(op):
    assert generators.MISALIGNED in generators.classes_for(op)
    cases = [generators.draw_case(op, 0, generators.MISALIGNED, i) for i in range(3)]
    for c in cases:
        assert c.offsets is not None and len(c.offsets) == len(c.inputs)
        assert "@+" in c.summary()
    for position in range(len(cases[0].inputs)):
        assert {c.offsets[position] for c in cases if position < len(c.inputs)} <= set(OFFSETS)
    assert {c.offsets[0] for c in cases} == set(OFFSETS)


def test_the_random_ops_have_no_misaligned_class():
    assert generators.MISALIGNED not in generators.classes_for(Op.rand_uniform)


def test_replay_files_and_shrinking_keep_a_cases_offsets():
    """A misaligned counterexample replays misaligned, and its shrunk candidates stay so."""
    from conformance.shrink import decode_case, encode_case, shrink
    case = generators.draw_case(Op.add, 0, generators.MISALIGNED, 1)
    again = decode_case(encode_case(case))
    assert again.offsets == case.offsets and again.summary() == case.summary()
    assert decode_case(encode_case(generators.draw_case(Op.add, 0, "normal", 0))).offsets is None
    seen = []

    def fails_when_misaligned(c):
        seen.append(c.offsets)
        failure = SimpleNamespace(element=[], output="value", reason="not-correctly-rounded")
        return [failure] if c.offsets is not None and c.inputs[0].size > 1 else None
    small = shrink(case, fails_when_misaligned, budget=20)
    assert len(seen) > 1 and all(o is not None for o in seen)
    assert small.offsets is not None and small.inputs[0].size <= case.inputs[0].size
