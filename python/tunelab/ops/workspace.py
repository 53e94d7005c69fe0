"""Scratch tensors an op keeps from one call to the next on the same stream, so that a repeated call does not pay
torch's caching allocator for them again (the similarity search's dense key matrix: ~4-6 us of host time a call on
an H200 host, ``benchmarks/results/similarity_op_host_parts_hot_h200.json``).

Safe reuse rests on stream order. The tensors of a slot are made on torch's current stream of the call, and every
later call that gets them back launches on that same stream, so its kernels run after every kernel queued before
them, those of the earlier calls included. Two threads on one stream interleave their launches, so a slot belongs
to one (device, stream handle, thread). A stream is known by its handle: one destroyed with work still queued on a
slot's tensors, whose handle a new stream then gets, would hand the new stream that slot without the ordering
(torch's own streams live as long as the process; an external stream a caller destroys is the case). Nothing is kept:

- while the stream is being captured into a CUDA graph: the graph must own what its kernels use (torch's graph
  pool), for as long as the graph lives, which a slot cannot promise;
- above :data:`MAX_BYTES` for one call: a call that needs that much scratch runs kernels far longer than an
  allocation, and holding it between calls would take the memory from everything else.

At most :data:`MAX_SLOTS` slots and :data:`MAX_TOTAL_BYTES` are held; the slot used longest ago goes first (a slot of
a thread that has ended stays until then, or until :func:`release`). Dropping a slot gives its tensors back to
torch's allocator, which hands the memory to the next allocation on their stream, whose work is queued after theirs.
:func:`release` drops every slot (``tunelab.ops.similarity.release_memory`` calls it).
"""
from __future__ import annotations

import threading
from typing import Callable, Hashable

from tunelab import _core

#: Largest scratch (bytes, the tensors of one slot together) kept between calls.
MAX_BYTES = 64 << 20
#: Most slots, and most bytes of all slots together, held at once.
MAX_SLOTS = 16
MAX_TOTAL_BYTES = 256 << 20

_slots: dict[tuple, tuple[Hashable, tuple, int]] = {}  # key -> (spec, tensors, nbytes)
_lock = threading.Lock()


def reuse(device: int, stream: int, spec: Hashable, nbytes: int, make: Callable[[], tuple]) -> tuple:
    """The tensors ``make()`` returns for ``spec`` (any hashable description of them: shapes, dtypes), kept for the
    next call with the same ``spec`` on ``stream`` (a handle, torch's current stream of ``device``, on which the
    tensors are used) from this thread; ``nbytes``: their size together. A slot whose ``spec`` differs is replaced.
    Returns ``make()``'s result unkept while ``stream`` is being captured into a CUDA graph or above MAX_BYTES."""
    if nbytes > MAX_BYTES or _capturing(stream, device):
        return make()
    key = (device, stream, threading.get_ident())
    held = _slots.get(key)
    if held is not None and held[0] == spec:
        with _lock:  # the most recently used slot goes last
            if _slots.get(key) is held and next(reversed(_slots)) != key:
                _slots[key] = _slots.pop(key)
        return held[1]
    tensors = make()
    with _lock:
        _slots.pop(key, None)
        while _slots and (len(_slots) >= MAX_SLOTS or _held() + nbytes > MAX_TOTAL_BYTES):
            _slots.pop(next(iter(_slots)))
        _slots[key] = (spec, tensors, nbytes)
    return tensors


def _capturing(stream: int, device: int) -> bool:
    return bool(_core.stream_is_capturing(stream, device))


def held_bytes() -> int:
    """Bytes held by the slots now (the sizes their callers gave)."""
    with _lock:
        return _held()


def _held() -> int:
    return sum(nbytes for _, _, nbytes in _slots.values())


def release() -> int:
    """Drop every slot (their memory goes back to torch's allocator, for later allocations on their stream, which
    run after the work queued there); returns the bytes they held."""
    with _lock:
        held = _held()
        _slots.clear()
    return held
