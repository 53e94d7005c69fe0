"""Out-of-core similarity search: a corpus larger than free GPU memory streams through the GPU in chunks.

Pipeline (one call of :func:`search_streamed`)::

    host corpus ─(pinned? direct : memcpy into 2 pinned staging buffers)─▶ copy stream i % S ─▶ device buffer i % S
                                                                               │ event "copied i"
    compute stream (torch's current): wait(copied i) ─▶ search chunk i ─▶ merge into running top-k ─▶ event "done i"
    copy stream of chunk i + S waits for "done i" before it overwrites device buffer s

so chunk i+1 (up to i+S-1) is copied while chunk i is searched. The running top-k of every query lives on the GPU
as candidate list 0 of the merge workspace: each chunk's search writes lists 1..splits with global corpus indices,
and the merge kernel folds lists 0..splits back into list 0 (in place) - or, after the last chunk, into the sorted
output. The order is total (score, then index), so the result is bit-identical to an in-memory search.

Chunk size: ``memory_fraction`` (default 0.85) of free GPU memory, or an explicit ``memory_budget`` in bytes, minus
the fixed workspace, divided among the S device buffers (:func:`plan_chunks`). ``chunk_rows`` and ``streams`` are
tunable like any parameter. Pinned host buffers, device buffers and streams come from a pool reused across calls
(:data:`POOL`); :func:`release_memory` frees them (also at interpreter exit, through
``tunelab.ops.similarity.release_memory``).
"""
from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from tunelab.errors import InputError

#: Pinned staging buffer per copy when the host corpus is pageable (two of them alternate).
STAGING_BYTES = 256 << 20
#: Allocator rounding and small tensors: kept free inside the budget.
SLACK_BYTES = 16 << 20


@dataclass(frozen=True)
class ChunkPlan:
    """How a corpus of ``n`` rows is cut: ``num_chunks`` chunks of ``chunk_rows`` rows, ``streams`` buffers."""

    n: int
    row_bytes: int
    chunk_rows: int
    num_chunks: int
    streams: int
    budget_bytes: int
    fixed_bytes: int
    device_bytes: int      # device chunk buffers: streams * chunk_rows * row_bytes
    staging_rows: int      # rows per pinned staging copy (pageable host corpora)
    source: str            # "fraction" (of free memory), "budget" or "fixed" (chunk_rows given)

    def to_dict(self) -> dict:
        """The plan as a plain dict (JSON-ready)."""
        return asdict(self)


def plan_chunks(n: int, row_bytes: int, *, free_bytes: int, memory_fraction: float = 0.85,
                memory_budget: int | None = None, streams: int = 2, chunk_rows: int | None = None,
                fixed_bytes: int = 0, staging_bytes: int = STAGING_BYTES) -> ChunkPlan:
    """Chunking of an ``n``-row corpus with ``row_bytes`` per row for the given memory.

    The budget is ``memory_budget`` if given, else ``free_bytes * memory_fraction``. It must hold ``fixed_bytes``
    (queries, candidate workspace, outputs), a small slack, and ``streams`` device buffers of ``chunk_rows`` rows.
    Without ``chunk_rows`` the buffers take the whole remaining budget (capped at n rows): fewer, larger chunks
    mean fewer launches and merges, and since a chunk is searched ~50x faster than it is copied, only the last
    chunk's search is not hidden behind copies. Raises InputError when even one row per buffer does not fit or a
    forced ``chunk_rows`` exceeds the budget.
    """
    if n < 1 or row_bytes < 1:
        raise InputError(f"nothing to stream: n={n} rows of {row_bytes} bytes")
    if streams < 1:
        raise InputError(f"streams={streams} must be >= 1")
    if not 0 < memory_fraction <= 1:
        raise InputError(f"memory_fraction={memory_fraction} must be in (0, 1]")
    if memory_budget is not None:
        budget, source = int(memory_budget), "budget"
    else:
        budget, source = int(free_bytes * memory_fraction), "fraction"
    usable = budget - int(fixed_bytes) - SLACK_BYTES
    max_rows = usable // (streams * row_bytes) if usable > 0 else 0
    if max_rows < 1:
        raise InputError(f"the GPU memory budget of {budget / 2**20:.1f} MiB ({source}) cannot hold the search "
                         f"workspace ({(fixed_bytes + SLACK_BYTES) / 2**20:.1f} MiB) plus {streams} chunk buffer(s) of "
                         f"at least one {row_bytes}-byte row; raise memory_budget / memory_fraction, free GPU memory, "
                         "or use fewer streams or queries")
    if chunk_rows is not None:
        if chunk_rows < 1:
            raise InputError(f"chunk_rows={chunk_rows} must be >= 1")
        if chunk_rows > max_rows and chunk_rows < n:
            raise InputError(f"chunk_rows={chunk_rows} x {streams} stream buffer(s) x {row_bytes} bytes exceeds the "
                             f"memory budget ({budget / 2**20:.1f} MiB, {source}); at most {max_rows} rows fit")
        rows, source = min(int(chunk_rows), n), "fixed"
        if rows > max_rows:
            raise InputError(f"chunk_rows={chunk_rows} (whole corpus) does not fit the budget; at most {max_rows} rows")
    else:
        rows = min(max_rows, n)
    num = -(-n // rows)
    staging_rows = max(1, min(rows, staging_bytes // row_bytes))
    return ChunkPlan(n=n, row_bytes=row_bytes, chunk_rows=rows, num_chunks=num, streams=streams, budget_bytes=budget,
                     fixed_bytes=int(fixed_bytes), device_bytes=streams * rows * row_bytes, staging_rows=staging_rows,
                     source=source)


class BufferPool:
    """Pinned host buffers, device buffers, CUDA streams and their last-use events, reused across calls.

    Buffers are keyed by a slot name; a request for more bytes than a slot holds replaces its buffer. Events of the
    last copy from each staging buffer and of the last compute on each device buffer are kept, so a new call never
    overwrites a buffer that an earlier call's asynchronous work still reads.
    """

    def __init__(self) -> None:
        self._host: dict[Any, Any] = {}
        self._device: dict[Any, Any] = {}
        self._streams: dict[int, list] = {}
        self.events: dict[Any, Any] = {}  # (kind, slot[, device]) -> event of the buffer's last asynchronous use
        self._lock = threading.Lock()

    @staticmethod
    def _event_key(kind: str, slot: Any, device=None) -> tuple:
        return ("host", slot) if kind == "host" else ("device", (slot, str(device)))

    def last_use(self, kind: str, slot: Any, device=None):
        """The event recorded by :meth:`mark_use` for the ``kind`` ("host" or "device") buffer ``slot``, or None."""
        return self.events.get(self._event_key(kind, slot, device))

    def mark_use(self, kind: str, slot: Any, event, device=None) -> None:
        """Record ``event`` as the last asynchronous use of a buffer: replacing or reusing it waits for it."""
        self.events[self._event_key(kind, slot, device)] = event

    def host(self, slot: Any, nbytes: int):
        """A pinned uint8 host tensor of at least ``nbytes`` bytes."""
        import torch

        with self._lock:
            buf = self._host.get(slot)
            if buf is None or buf.numel() < nbytes:
                ev = self.events.pop(self._event_key("host", slot), None)
                if ev is not None:
                    ev.synchronize()
                self._host[slot] = None
                buf = torch.empty(int(nbytes), dtype=torch.uint8, pin_memory=True)
                self._host[slot] = buf
            return buf

    def device(self, slot: Any, nbytes: int, device):
        """A uint8 device tensor of at least ``nbytes`` bytes (256-byte aligned, from torch's allocator)."""
        import torch

        key = (slot, str(device))
        with self._lock:
            buf = self._device.get(key)
            if buf is None or buf.numel() < nbytes:
                ev = self.events.pop(self._event_key("device", slot, device), None)
                if ev is not None:
                    ev.synchronize()
                self._device[key] = None
                buf = torch.empty(int(nbytes), dtype=torch.uint8, device=device)
                self._device[key] = buf
            return buf

    def streams(self, device_index: int, count: int) -> list:
        """``count`` copy streams of a device (created once)."""
        import torch

        with self._lock:
            have = self._streams.setdefault(device_index, [])
            while len(have) < count:
                have.append(torch.cuda.Stream(device=device_index))
            return have[:count]

    def held_bytes(self) -> dict:
        """Bytes currently held: {"pinned": ..., "device": ...}."""
        return {"pinned": sum(b.numel() for b in self._host.values() if b is not None),
                "device": sum(b.numel() for b in self._device.values() if b is not None)}

    def release(self) -> None:
        """Wait for outstanding work on the pool's buffers, then free everything (and torch's caches)."""
        try:
            import torch
        except ImportError:
            return
        with self._lock:
            for ev in self.events.values():
                try:
                    ev.synchronize()
                except Exception:  # noqa: BLE001 - a dead context: nothing to wait for
                    pass
            self.events.clear()
            had_device = bool(self._device)
            self._host.clear()
            self._device.clear()
            self._streams.clear()
        if had_device and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
        empty_host = getattr(torch._C, "_host_emptyCache", None)  # pinned blocks cached by torch's host allocator
        if empty_host is not None:
            try:
                empty_host()
            except Exception:  # noqa: BLE001
                pass


POOL = BufferPool()


def release_memory() -> None:
    """Free the streaming pool's pinned host and device buffers."""
    POOL.release()


def search_streamed(queries, corpus, k: int, *, metric: str = "ip", config: Mapping[str, Any] | None = None,
                    explicit: bool = False, memory_fraction: float = 0.85, memory_budget: int | None = None,
                    chunk_rows: int | None = None, streams: int = 2, splits: int | None = None,
                    stats: dict | None = None):
    """Top-k search of ``queries`` (GPU) over ``corpus`` (host memory, or a GPU tensor searched chunk by chunk).

    Same results as :func:`tunelab.ops.similarity_search` (bit-identical). ``stats``, if a dict, receives the
    chunk plan and the pinned/pageable path taken. Work is enqueued on torch's current stream (copies on the pool's
    copy streams); outputs are ready in that stream's order. A pinned host corpus is read by DMA after this
    returns: do not modify it before the results are used.
    """
    import torch

    from tunelab.ops import similarity as sim

    dev = queries.device
    di = dev.index if dev.index is not None else torch.cuda.current_device()
    dt = str(queries.dtype).replace("torch.", "")
    code = sim.DTYPE_CODES[dt]
    nq, d = queries.shape
    n = corpus.shape[0]
    eb = queries.element_size()
    pad = sim.needs_padding(code, d)
    d_pad = d + 1 if pad else d
    if pad:
        queries = sim._pad_d(queries, d_pad)
    queries = sim._row_strided(queries)
    row_bytes = d_pad * eb
    cfg = dict(config) if config is not None else sim.default_config(nq, k, dt, d)
    if cfg["MERGE"] in (sim.MERGE_DENSE, *sim.MERGES_FILTERED):  # one corpus's keys: chunks need candidate lists
        if explicit:
            what = "dense key matrix" if cfg["MERGE"] == sim.MERGE_DENSE else "filtered candidate rows"
            raise InputError(f"config MERGE={cfg['MERGE']} ({what}) searches a GPU corpus in one launch; a "
                             f"streamed corpus (host memory, a memory budget or chunk_rows) needs MERGE 0..4")
        cfg = sim.default_config(nq, k, dt, d)
    on_gpu = corpus.is_cuda
    # host corpora land in our chunk buffers (256-byte aligned, rows d_pad apart); a GPU corpus is read in place
    ptrs, strides = [queries.data_ptr(), 256], [queries.stride(0), d_pad]
    if on_gpu and not pad:
        ptrs.append(corpus.data_ptr())
        strides.append(corpus.stride(0) if corpus.shape[0] > 1 else d_pad)
    arch = sim._arch(di)
    cfg = sim._fit_vec(cfg, dt, ptrs, strides, d_pad, explicit, k, metric, arch)
    compiled = sim.compile_search(cfg, dtype=dt, metric=metric, arch=arch)
    target = compiled.resident_blocks(di, k)
    max_splits = max(compiled.cluster,  # a cluster's blocks need a list each
                     min(target if splits is None else int(splits), sim.WORKSPACE_CAP_BYTES // (nq * k * 8)))
    fixed = (max_splits + 1) * nq * k * 8 + nq * k * 12 + (queries.numel() * eb if pad else 0)
    # free memory plus what this process can reuse: the pool's own chunk buffers and torch's cached blocks
    free = int(torch.cuda.mem_get_info(dev)[0]) + POOL.held_bytes()["device"] + \
        max(0, int(torch.cuda.memory_reserved(dev)) - int(torch.cuda.memory_allocated(dev)))
    plan = plan_chunks(n, row_bytes, free_bytes=free, memory_fraction=memory_fraction, memory_budget=memory_budget,
                       streams=1 if on_gpu else streams, chunk_rows=chunk_rows,
                       fixed_bytes=fixed if not on_gpu else 0)
    pinned = (not on_gpu) and corpus.is_pinned()
    if stats is not None:
        stats.update(plan.to_dict(), pinned=pinned, on_gpu=on_gpu, config=dict(cfg), max_splits=max_splits)

    cand_key = torch.empty((max_splits + 1, nq, k), dtype=torch.float32, device=dev)
    cand_idx = torch.empty((max_splits + 1, nq, k), dtype=torch.int32, device=dev)
    cand_key[0].fill_(float("-inf"))
    cand_idx[0].fill_(-1)
    scores = torch.empty((nq, k), dtype=torch.float32, device=dev)
    indices = torch.empty((nq, k), dtype=torch.int64, device=dev)
    compute = torch.cuda.current_stream(dev)
    cstream = int(compute.cuda_stream)

    def search_chunk(i: int, r0: int, rows: int, chunk_ptr: int, c_stride: int) -> None:
        p = compiled.plan(di, nq, rows, k, splits=max_splits if splits is not None else None)
        if p["splits"] > max_splits:  # never more lists than the workspace holds
            p = compiled.plan(di, nq, rows, k, splits=max_splits)
        compiled.launch_search(di, cstream, queries, chunk_ptr, c_stride, rows, k, cand_key, cand_idx, r0, 1, p)
        last = i == plan.num_chunks - 1
        if last:
            compiled.launch_merge(di, cstream, cand_key, cand_idx, queries, k, p["splits"] + 1, out_score=scores,
                                  out_index=indices)
        else:  # fold into the running list 0, in place
            compiled.launch_merge(di, cstream, cand_key, cand_idx, queries, k, p["splits"] + 1, out_key=cand_key[0],
                                  out_idx=cand_idx[0])

    if on_gpu:  # a GPU corpus under a budget: chunks are views, no copies
        for i in range(plan.num_chunks):
            r0 = i * plan.chunk_rows
            rows = min(plan.chunk_rows, n - r0)
            chunk = corpus[r0:r0 + rows]
            if pad:
                chunk = sim._pad_d(chunk, d_pad)
            chunk = sim._row_strided(chunk)
            search_chunk(i, r0, rows, chunk.data_ptr(), chunk.stride(0))
        return scores, indices

    S = plan.streams
    copy_streams = POOL.streams(di, S)
    bufs = [POOL.device(("chunk", s), plan.chunk_rows * row_bytes, dev) for s in range(S)]
    staging = []
    if not pinned:
        staging = [POOL.host(("stage", j), plan.staging_rows * d * eb) for j in range(2)]
    stage_turn = 0
    for i in range(plan.num_chunks):
        r0 = i * plan.chunk_rows
        rows = min(plan.chunk_rows, n - r0)
        s = i % S
        cs = copy_streams[s]
        prev = POOL.last_use("device", ("chunk", s), dev)
        if prev is not None:
            cs.wait_event(prev)  # the search that last read this buffer is done
        dst = bufs[s][: rows * row_bytes].view(queries.dtype).view(rows, d_pad)
        with torch.cuda.stream(cs):
            if pad:
                dst[:, d:].zero_()
            target_view = dst[:, :d] if pad else dst
            if pinned:
                target_view.copy_(corpus[r0:r0 + rows], non_blocking=True)
            else:
                for a in range(r0, r0 + rows, plan.staging_rows):
                    b = min(a + plan.staging_rows, r0 + rows)
                    j = stage_turn % 2
                    stage_turn += 1
                    ev = POOL.last_use("host", ("stage", j))
                    if ev is not None:
                        ev.synchronize()  # its previous DMA has finished: safe to overwrite on the host
                    st = staging[j][: (b - a) * d * eb].view(queries.dtype).view(b - a, d)
                    st.copy_(corpus[a:b])  # host memcpy, pageable -> pinned (overlaps the other buffer's DMA)
                    target_view[a - r0:b - r0].copy_(st, non_blocking=True)
                    ev = torch.cuda.Event()
                    ev.record(cs)
                    POOL.mark_use("host", ("stage", j), ev)
            copied = torch.cuda.Event()
            copied.record(cs)
        compute.wait_event(copied)
        # the buffer (allocated on the compute stream) is written on the copy stream: tell the allocator
        bufs[s].record_stream(cs)
        search_chunk(i, r0, rows, dst.data_ptr(), d_pad)
        done = torch.cuda.Event()
        done.record(compute)
        POOL.mark_use("device", ("chunk", s), done, dev)
    return scores, indices
