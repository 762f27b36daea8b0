"""The multi-tensor Adam step's host side without a GPU: the chunk list and the 32-bit size
check (the kernels and their bits: tests/test_cuda_adam_multi.py)."""
from types import SimpleNamespace

import numpy as np
import pytest

from engine.errors import UInt32OverflowError
from engine.optim import Adam
from engine.providers.native_cuda.optim_multi import CHUNK, MultiTensorTable, chunk_list
from engine.tensor import tensor


def test_chunks_cover_every_element_once_in_order():
    sizes = [0, 1, CHUNK, CHUNK + 1, 3 * CHUNK - 1]
    got = chunk_list(sizes).reshape(-1, 2).tolist()
    assert got == [[1, 0], [2, 0], [3, 0], [3, CHUNK], [4, 0], [4, CHUNK], [4, 2 * CHUNK]]
    assert chunk_list([0, 0]).size == 0 and chunk_list([]).dtype == np.uint32


def test_a_parameter_past_32_bits_is_named():
    with pytest.raises(UInt32OverflowError, match=r"parameter 1 has 4294967296 elements; the "
                                                  r"kernel indexes with 32 bits"):
        MultiTensorTable([SimpleNamespace(size=5), SimpleNamespace(size=1 << 32)], [], [], [])


def test_cpu_parameters_take_the_numpy_path(cpu_session):
    opt = Adam([tensor(np.ones(3, np.float32), requires_grad=True)])
    assert opt.multi_tensor and not opt._on_cuda()
    assert not Adam([tensor(np.ones(3, np.float32))], multi_tensor=False)._on_cuda()
