"""The scratch tensors an op keeps between calls (``tunelab.ops.workspace``): which calls get them back, when nothing
is kept, and that release drops them. Runs on the CPU (the slots hold whatever ``make`` returns; the capture check,
a driver call, is replaced); the GPU suite checks the search over kept buffers, in CUDA graphs and from two threads
(tests/test_similarity_gpu.py::test_repeated_calls_reuse_scratch_and_replay_one_graph)."""
from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")

from tunelab.ops import workspace  # noqa: E402


@pytest.fixture()
def slots(monkeypatch):
    capturing = set()
    monkeypatch.setattr(workspace, "_capturing", lambda stream, device: stream in capturing)
    workspace.release()
    yield capturing
    workspace.release()


def _maker(log, n=4):
    def make():
        log.append(n)
        return (torch.empty(n), None)

    return make


def test_same_stream_thread_and_spec_get_the_same_tensors(slots):
    log = []
    a = workspace.reuse(0, 7, ("f32", 4), 16, _maker(log))
    b = workspace.reuse(0, 7, ("f32", 4), 16, _maker(log))
    assert b[0] is a[0] and log == [4]
    assert workspace.held_bytes() == 16


def test_another_stream_device_or_spec_gets_its_own(slots):
    log = []
    a = workspace.reuse(0, 7, "s", 16, _maker(log))
    assert workspace.reuse(0, 8, "s", 16, _maker(log))[0] is not a[0]  # another stream
    assert workspace.reuse(1, 7, "s", 16, _maker(log))[0] is not a[0]  # another device
    c = workspace.reuse(0, 7, "t", 32, _maker(log, 8))  # another spec replaces the slot
    assert c[0] is not a[0] and workspace.reuse(0, 7, "t", 32, _maker(log, 8))[0] is c[0]
    assert log == [4, 4, 4, 8]


def test_each_thread_has_its_own_slot(slots):
    """Two threads on one stream interleave their launches: a slot shared by them would let one call's search
    overwrite the keys the other's select has yet to read."""
    mine = workspace.reuse(0, 7, "s", 16, _maker([]))
    theirs = []
    t = threading.Thread(target=lambda: theirs.append(workspace.reuse(0, 7, "s", 16, _maker([]))))
    t.start()
    t.join()
    assert theirs[0][0] is not mine[0]
    assert workspace.reuse(0, 7, "s", 16, _maker([]))[0] is mine[0]


def test_nothing_kept_while_capturing_or_above_the_size_cap(slots):
    log = []
    slots.add(9)
    a = workspace.reuse(0, 9, "s", 16, _maker(log))
    b = workspace.reuse(0, 9, "s", 16, _maker(log))
    assert a[0] is not b[0] and log == [4, 4]
    big = workspace.MAX_BYTES + 1
    assert workspace.reuse(0, 7, "s", big, _maker(log))[0] is not workspace.reuse(0, 7, "s", big, _maker(log))[0]
    assert workspace.held_bytes() == 0


def test_slot_used_longest_ago_goes_first_and_release_drops_all(slots):
    for stream in range(workspace.MAX_SLOTS + 3):
        workspace.reuse(0, stream, "s", 16, _maker([]))
    assert workspace.held_bytes() == 16 * workspace.MAX_SLOTS
    log = []
    workspace.reuse(0, 3, "s", 16, _maker(log))  # the oldest slot kept, and now the most recently used
    assert log == []
    workspace.reuse(0, 0, "s", 16, _maker(log))  # streams 0..2, the oldest, were dropped; stream 4's goes now
    workspace.reuse(0, 3, "s", 16, _maker(log))
    workspace.reuse(0, 4, "s", 16, _maker(log))
    assert log == [4, 4]
    assert workspace.release() == 16 * workspace.MAX_SLOTS
    assert workspace.held_bytes() == 0


def test_all_slots_together_stay_under_the_total_cap(slots, monkeypatch):
    monkeypatch.setattr(workspace, "MAX_TOTAL_BYTES", 40)
    log = []
    workspace.reuse(0, 1, "s", 16, _maker(log))
    workspace.reuse(0, 2, "s", 16, _maker(log))
    workspace.reuse(0, 3, "s", 16, _maker(log))  # 48 bytes would pass the cap: stream 1's slot goes
    assert workspace.held_bytes() == 32
    workspace.reuse(0, 2, "s", 16, _maker(log))
    workspace.reuse(0, 1, "s", 16, _maker(log))
    assert log == [4, 4, 4, 4]
