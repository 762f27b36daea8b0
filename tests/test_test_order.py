"""The test order tests/conftest.py gives a run: the long tests first by default (so under
xdist none of them starts late), TORCHLEAN_TEST_ORDER=reverse or shuffle:SEED to find tests that
pass only in one order, and a named usage error for anything else."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import conftest

REPO = Path(__file__).resolve().parent.parent


def _items(*nodeids):
    return [SimpleNamespace(nodeid=n) for n in nodeids]


def _ids(items):
    return [i.nodeid for i in items]


def test_reverse_and_a_seeded_shuffle_reorder_every_item():
    names = [f"tests/test_a.py::t{i}" for i in range(20)]
    items = _items(*names)
    conftest.reorder(items, "reverse")
    assert _ids(items) == names[::-1]
    first, again = _items(*names), _items(*names)
    conftest.reorder(first, "shuffle:7")
    conftest.reorder(again, "shuffle:7")
    assert _ids(first) == _ids(again) != names and sorted(_ids(first)) == sorted(names)
    other = _items(*names)
    conftest.reorder(other, "shuffle:8")
    assert _ids(other) != _ids(first)
    unchanged = _items(*names)
    conftest.reorder(unchanged, "")
    assert _ids(unchanged) == names


@pytest.mark.parametrize("value", ["backwards", "shuffle", "shuffle:x", "shuffle:1.5"])
def test_an_unknown_order_is_a_usage_error_naming_the_choices(value):
    with pytest.raises(pytest.UsageError, match=rf"TORCHLEAN_TEST_ORDER='{value}' is not a test "
                                                r"order; expected 'reverse' or 'shuffle:SEED'"):
        conftest.reorder(_items("a::b"), value)


def test_the_long_tests_go_first_in_their_order_and_the_rest_keep_theirs():
    slow_a, slow_b = conftest.LONG_FIRST[0], conftest.LONG_FIRST[1]
    items = _items("tests/test_x.py::one", f"{slow_b}[p1]", "tests/test_x.py::two", slow_a,
                   f"{slow_b}[p2]", "tests/test_y.py::three")
    conftest.long_first(items)
    assert _ids(items) == [slow_a, f"{slow_b}[p1]", f"{slow_b}[p2]", "tests/test_x.py::one",
                           "tests/test_x.py::two", "tests/test_y.py::three"]


def test_every_long_test_named_is_collected():
    """A renamed test would silently lose its place at the front: each name must still be a
    collected test."""
    files = sorted({n.split("::")[0] for n in conftest.LONG_FIRST})
    env = {k: v for k, v in os.environ.items() if k != conftest.ORDER_ENV_VAR}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs", "-p",
                           "no:xdist", "-p", "no:cacheprovider", *files], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)
    # a module that skips itself when an optional dependency is missing (test_cluster*.py
    # without dask's distributed, as on the GPU machine) is not collected: its names may be absent
    skipped = set(re.findall(r"^SKIPPED \[\d+\] (tests/[\w/]+\.py):\d+: could not import",
                             proc.stdout, re.M))
    expected = [n for n in conftest.LONG_FIRST if n.split("::")[0] not in skipped]
    assert len(expected) >= len(conftest.LONG_FIRST) - 2, (skipped, proc.stdout[-2000:])
    lines = [line.split("[")[0] for line in proc.stdout.splitlines()
             if "::" in line and not line.startswith("SKIPPED")]
    assert set(expected) <= set(lines), set(expected) - set(lines)
    # and the run's own order puts them first, longest first (a parametrized one's cases together)
    front = [n for n in lines if n in expected]
    assert lines[:len(front)] == sorted(front, key=expected.index)


def test_a_run_with_a_bad_order_stops_before_running_anything():
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p",
                           "no:cacheprovider", "tests/test_types.py"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, conftest.ORDER_ENV_VAR: "sideways"})
    assert proc.returncode == 4, proc.stdout + proc.stderr     # pytest's usage error
    assert "TORCHLEAN_TEST_ORDER='sideways' is not a test order" in proc.stderr + proc.stdout
    assert " passed" not in proc.stdout


def _first_blocks(nodeids: list[str], workers: int) -> list[list[str]]:
    """The tests xdist's own load scheduler hands each of `workers` workers before any finishes."""
    from xdist.scheduler import LoadScheduling

    class Node:
        def __init__(self, wid):
            self.sent = []
            self.gateway = SimpleNamespace(id=f"gw{wid}")

        def send_runtest_some(self, indices):
            self.sent += indices

        def shutdown(self):
            pass

    config = SimpleNamespace(getoption=lambda name: None, getvalue=lambda name: None,
                             option=SimpleNamespace(numprocesses=workers, tx=[], dist="load"))
    sched = LoadScheduling.__new__(LoadScheduling)      # its __init__ parses the real -n spec
    sched.numnodes, sched.node2collection, sched.node2pending = workers, {}, {}
    sched.pending, sched.collection, sched.maxschedchunk = [], None, None
    sched.config, sched.log = config, lambda *a: None
    nodes = [Node(w) for w in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, nodeids)
    sched.schedule()
    return [[nodeids[i] for i in node.sent] for node in nodes]


@pytest.mark.parametrize("workers,others", [(16, 5200), (16, 1400), (2, 3700), (4, 40)])
def test_under_xdist_each_worker_starts_with_at_most_one_long_test(workers, others):
    """The first blocks xdist's scheduler hands out (replayed with its own code) hold the long
    tests one each, each at its block's head, longest first across workers; the run of
    2026-12-07f gave one worker five of them in a row."""
    pytest.importorskip("xdist")
    names = [f"tests/test_z.py::t{i}" for i in range(others)]
    items = _items(*names[: others // 2], *conftest.LONG_FIRST, *names[others // 2:])
    conftest.long_first(items, workers)
    assert sorted(_ids(items)) == sorted(names + list(conftest.LONG_FIRST))
    blocks = _first_blocks(_ids(items), workers)
    long = set(conftest.LONG_FIRST)
    per_worker = [[n for n in block if n in long] for block in blocks]
    if len(blocks[0]) * workers >= len(long):        # room for each long test in a first block
        assert max(len(b) for b in per_worker) <= -(-len(long) // workers)
        assert sum(len(b) for b in per_worker) == len(long)
    for block, mine in zip(blocks, per_worker):
        assert block[:len(mine)] == mine              # long ones at the head of the block
    heads = [b[0] for b in per_worker if b]
    assert heads == list(conftest.LONG_FIRST[:len(heads)])   # the longest first, one per worker
    others_order = [n for n in _ids(items) if n not in long]
    assert others_order == names                                # the rest keep their order


def test_the_old_front_loading_gave_one_worker_many_long_tests():
    """The check above can fail: with the long tests all at the front, as before 2026-12-07f, the
    first worker's block holds several of them."""
    pytest.importorskip("xdist")
    names = [f"tests/test_z.py::t{i}" for i in range(5200)]
    items = _items(*names, *conftest.LONG_FIRST)
    conftest.long_first(items)                          # one process: all at the front
    first = _first_blocks(_ids(items), 16)[0]
    assert sum(n in set(conftest.LONG_FIRST) for n in first) == len(conftest.LONG_FIRST)
