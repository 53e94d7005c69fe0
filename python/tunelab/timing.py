"""The measurement protocol, for our kernels, baselines and users' kernels alike.

Per sample: L2 flush (a write over a buffer twice the L2) -> the caller's ``prepare``, if any -> CUDA event ->
launch -> CUDA event; warm-up first; raw samples returned in microseconds. The loop itself is C++
(``_core.time_launches``): a prepared launch of ours and a Python callable such as a torch op go through the very
same code, so neither side gets a cheaper timing path. For kernels of a few microseconds, ``cuda_graph=True``
replays a CUDA graph of ``graph_launches`` launches per sample so that host launch overhead does not rank them.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from tunelab import _core
from tunelab.errors import ConfigError


def _current_stream() -> int:
    try:
        import torch
    except ImportError:
        return 0
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return int(torch.cuda.current_stream().cuda_stream)
    return 0


def time_callable(
    fn: Callable[[], Any] | "_core.PreparedLaunch",
    *,
    warmup: int = 10,
    samples: int = 100,
    flush_l2: bool = True,
    cuda_graph: bool = False,
    graph_launches: int = 20,
    stream: int | None = None,
    prepare: Callable[[], Any] | "_core.PreparedLaunch" | None = None,
) -> np.ndarray:
    """Time ``fn`` with the core's protocol and return ``samples`` per-launch times in microseconds.

    ``fn`` is a ``_core.PreparedLaunch`` (from :meth:`tunelab.CompiledKernel.prepare`) or any Python callable
    that enqueues GPU work on torch's current stream (a torch op, an SDPA call). ``stream`` defaults to
    torch's current stream. With ``cuda_graph=True`` each sample replays a graph of ``graph_launches`` calls
    and reports the time per call; the L2 flush then precedes each replay, not each call.

    ``prepare`` (the same kinds as ``fn``, or None) runs before each sample, after its flush and before its first
    event, so it is never timed: a state of the caches other than the flush's, such as a read over a buffer larger
    than L2 with ``flush_l2=False`` (L2 evicted, but not left full of dirty lines). It does not run in warm-up.
    """
    if samples < 1:
        raise ConfigError(f"samples={samples} must be >= 1")
    if cuda_graph and graph_launches < 1:
        raise ConfigError(f"graph_launches={graph_launches} must be >= 1 when cuda_graph=True")
    if prepare is not None and not (isinstance(prepare, _core.PreparedLaunch) or callable(prepare)):
        raise ConfigError(f"prepare must be a PreparedLaunch, a callable or None, got {type(prepare).__name__}")
    stream = _current_stream() if stream is None else int(stream)
    if isinstance(fn, _core.PreparedLaunch):
        raw = _core.time_launches(fn, stream, warmup, samples, flush_l2, graph_launches if cuda_graph else 0, prepare)
        return np.asarray(raw, dtype=np.float64)
    if not callable(fn):
        raise ConfigError(f"fn must be a PreparedLaunch or a callable, got {type(fn).__name__}")
    if not cuda_graph:
        return np.asarray(_core.time_launches(fn, stream, warmup, samples, flush_l2, 0, prepare), dtype=np.float64)
    # Python callables are captured with torch's graph API, which makes torch's allocator capture-aware
    # (a raw driver capture would break on the first tensor allocated inside the callable).
    import torch

    for _ in range(max(warmup, 1)):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(graph_launches):
            fn()
    stream = int(torch.cuda.current_stream().cuda_stream)
    raw = _core.time_launches(graph.replay, stream, 1, samples, flush_l2, 0, prepare)
    return np.asarray(raw, dtype=np.float64) / graph_launches


def l2_flush_bytes() -> int:
    """Size of the buffer written between samples to evict the kernel's data from L2 (twice the L2)."""
    return int(_core.l2_flush_bytes())
