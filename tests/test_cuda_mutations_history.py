"""Issue 35's classes 2 to 4 on the GPU: tests/test_mutations_history.py's planted bugs as CUDA
capsules, through the harness's device path (uploads, misaligned views into CuPy allocations,
device-side poisoning, inputs compared on the device), flagged for their reasons over 3 seeds; its
correct kernels clean over 10 seeds; misalign.upload's views on the device. The bugs that act on
the memory a kernel is handed (NaNs rewritten in place, reads from the aligned base) run on device
memory (DEVICE_SIDE_HISTORY); the others compute on the host (test_cuda_mutations.on_gpu)."""
import numpy as np
import pytest

import mutants_history as H
import test_cuda_mutations as G
import test_mutations as T
import test_mutations_history as TH

pytestmark = pytest.mark.cuda

# the kernels of MUTANTS_HISTORY that take CuPy arrays as they are (their bug acts on the device
# memory they were handed); test_cuda_mutations.DEVICE_SIDE's format
DEVICE_SIDE_HISTORY = {
    "abs_canonicalises_the_nans_of_its_input": H.abs_canonicalising_its_input,
    "max_canonicalises_the_nans_of_its_second_input": H.max_canonicalising_its_second_input,
    "add_reads_both_operands_from_their_aligned_base": H.add_reading_from_aligned_bases,
    "concat_reads_its_last_input_from_its_aligned_base":
        H.concat_reading_its_last_input_from_its_aligned_base,
}


def _mutant(name):
    op, forward, policy, vjp, declared, reason, allowed = TH.MUTANTS_HISTORY[name]
    fwd = DEVICE_SIDE_HISTORY.get(name) or G.on_gpu(forward)
    bwd = G.vjp_on_gpu(vjp) if vjp else None
    return G.cuda_capsule(op, f"mutant.{name}", fwd, policy, bwd, declared), reason, allowed


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("name", sorted(TH.MUTANTS_HISTORY))
def test_planted_bug_is_flagged_on_the_gpu(name, seed):
    cap_handler, reason, allowed = _mutant(name)
    T.assert_caught(T.campaign(cap_handler, seed=seed), reason, allowed)


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("name", sorted(TH.CORRECT_HISTORY))
def test_correct_kernels_stay_clean_on_the_gpu(name, seed):
    op, forward, policy, vjp = TH.CORRECT_HISTORY[name]
    cap_handler = G.cuda_capsule(op, f"correct.{name}", G.on_gpu(forward), policy,
                                 G.vjp_on_gpu(vjp) if vjp else None)
    result = T.campaign(cap_handler, seed=seed,
                        only=None if seed == 0 else TH.SEEDED_HISTORY)
    assert result["status"] == "passed", (result["failure_reasons"], result["harness_errors"])


@pytest.mark.parametrize("shape", [(), (0,), (1,), (7,), (3, 5), (1025,)])
@pytest.mark.parametrize("offset", (0, 4, 8, 12))
def test_upload_gives_a_device_view_at_the_offset_with_the_bits(shape, offset):
    import cupy
    from conformance.misalign import ALIGNMENT, PAD_BITS, offset_of, upload
    rng = np.random.default_rng(offset)
    x = rng.integers(0, 2 ** 32, size=shape, dtype=np.uint32).view(np.float32)
    v = upload(x, cupy, offset)
    assert isinstance(v, cupy.ndarray) and v.shape == x.shape and v.dtype == x.dtype
    assert np.array_equal(v.get().view(np.uint32), x.view(np.uint32))
    assert offset_of(v) == offset % ALIGNMENT
    if x.size and offset:
        got = H.read_from_aligned_base(v).get().view(np.uint32).reshape(-1)
        assert np.all(got[: offset // 4] == PAD_BITS)
