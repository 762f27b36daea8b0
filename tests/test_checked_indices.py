"""engine.indices: indices checked on the host when written are taken by gather and scatter_add
by their bound alone (what a CUDA graph capture needs: no read back), and a bound over the
indexed extent, or an entry out of range when written, is the named error."""
import numpy as np
import pytest

from engine import ops
from engine.errors import IndexOutOfRangeError, ShapeError
from engine.indices import CheckedIndices, check_host
from engine.tensor import tensor


def test_gather_takes_checked_indices_by_their_bound():
    a = tensor(np.arange(12, dtype=np.float32).reshape(4, 3))
    idx = CheckedIndices(check_host([3, 0, 3], 4, "ids"), 4)
    assert np.array_equal(ops.gather(a, 0, idx).numpy(), a.numpy()[[3, 0, 3]])
    with pytest.raises(IndexOutOfRangeError, match=r"checked indices may reach 4, outside \[0, 4\)"):
        ops.gather(a, 0, CheckedIndices(np.array([0], np.int64), 5))


def test_check_host_names_the_first_bad_entry_and_a_bad_dtype():
    with pytest.raises(IndexOutOfRangeError, match=r"index 7 is outside \[0, 4\)"):
        check_host([1, 7, -1], 4, "tokens")
    with pytest.raises(ShapeError, match="must be integers"):
        check_host(np.array([0.5]), 4, "tokens")
    assert check_host(np.array([[1, 2]], np.uint8), 4, "t").dtype == np.int64


def test_gpt2_graph_needs_cuda(capsys):
    from engine.cli import main
    assert main(["gpt2", "--graph", "--steps", "1"]) == 2
    assert "--graph replays CUDA graphs and needs --device cuda" in capsys.readouterr().err
