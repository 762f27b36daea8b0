"""The allocator's CUDA-graph pools, on a fake driver (no GPU): a capture is served from its pool,
then from the cache, never from the driver (GraphAllocationError names the op); a pool's blocks
come back to the pool while the graph lives and to the cache when it closes; the sizing run
counts the most blocks of each size live at once and `reserve` fills the cache with them. Plus
the CPU-side refusals of engine.graphs and the quickstart's --graph."""
import pytest

from engine.errors import GraphAllocationError, GraphCaptureError
from engine.runtime.allocator import ExactSizeCache


class FakeRuntime:
    class CUDARuntimeError(Exception):
        status = 2

    def __init__(self):
        self.next, self.mallocs, self.frees = 0x1000, 0, 0

    def malloc(self, size):
        self.mallocs += 1
        self.next += 0x1000
        return self.next

    def free(self, ptr):
        self.frees += 1

    def deviceSynchronize(self):
        pass


def _cache():
    rt = FakeRuntime()
    return ExactSizeCache(0, runtime=rt), rt


def test_sizing_counts_the_most_blocks_of_each_size_live_at_once():
    cache, _ = _cache()
    before = cache.malloc(64, 0)          # live before the sizing run: not counted
    cache.begin_sizing()
    a, b = cache.malloc(64, 0), cache.malloc(64, 0)
    cache.free(a, 0)
    c = cache.malloc(64, 0)               # a's block again: still two live at most
    d = cache.malloc(128, 0)
    cache.free(before, 0)                 # a block from before the run: no count changes
    for p in (b, c, d):
        cache.free(p, 0)
    assert cache.end_sizing() == {64: 2, 128: 1}


def test_a_capture_takes_pool_then_cache_blocks_and_never_the_driver():
    cache, rt = _cache()
    cache.reserve({64: 2})
    assert rt.mallocs == 2 and cache.cache_bytes == 128
    pool = cache.open_pool(lambda: "op `softmax`")
    cache.capture_pool = pool
    x = cache.malloc(64, 0)
    cache.free(x, 0)                      # back to the pool, not the cache
    assert cache.cache_bytes == 64 and pool.free == {64: [x]}
    y = cache.malloc(64, 0)               # the pool's own block first
    assert y == x
    z = cache.malloc(64, 0)               # then the cache's last one, now the pool's
    assert cache.cache_bytes == 0 and set(pool.blocks) == {x, z} and pool.bytes == 128
    with pytest.raises(GraphAllocationError, match="op `softmax` needs a 64-byte block"):
        cache.malloc(64, 0)
    assert rt.mallocs == 2                # no driver allocation inside the capture
    cache.capture_pool = None
    assert cache.graph_bytes() == (128, 1)
    # After the capture: a pool block released goes back to the pool while the graph lives.
    cache.free(y, 0)
    assert cache.cache_bytes == 0 and pool.free == {64: [y]}
    # Closing: free pool blocks go to the cache, live ones when they are released.
    cache.close_pool(pool)
    assert cache.cache_bytes == 64 and cache.graph_bytes() == (0, 0)
    cache.free(z, 0)
    assert cache.cache_bytes == 128 and cache.live_bytes == 0
    # Ordinary allocations use them again.
    assert cache.malloc(64, 0) in (y, z)


def test_the_graph_layer_refuses_a_cpu_session():
    from engine import graphs
    from engine.session import Session, use_session
    with use_session(Session("cpu")):
        with pytest.raises(GraphCaptureError, match="needs a CUDA session"):
            graphs.capture(lambda x: x, (None,))


def test_quickstart_graph_needs_cuda(capsys):
    from engine.cli import main
    assert main(["quickstart_mlp", "--graph", "--steps", "2"]) == 2
    assert "--graph replays CUDA graphs and needs --device cuda" in capsys.readouterr().err
