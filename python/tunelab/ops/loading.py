"""Compiled kernels loaded once per CUDA device: the one loader every op's compiled config uses, and the stream an
op launches them on (:func:`current_stream`)."""
from __future__ import annotations

import threading
from typing import Sequence

from tunelab import _core


class DeviceFunctions:
    """The kernels ``names`` (lowered names) of one cubin, loaded on each CUDA device the first time it is asked
    for (thread-safe). Each ``_core.Function`` keeps its module loaded; launches and occupancy queries raise the
    function's dynamic shared-memory limit themselves when a size above 48 KiB is asked for."""

    def __init__(self, cubin: bytes, names: Sequence[str]):
        self._cubin = cubin
        self._names = tuple(names)
        self._loaded: dict[int, tuple] = {}
        self._lock = threading.Lock()

    def get(self, device: int) -> tuple:
        """The functions on ``device``, in the order of ``names`` (needs a GPU)."""
        fns = self._loaded.get(device)
        if fns is None:
            with self._lock:
                fns = self._loaded.get(device)
                if fns is None:
                    import torch

                    with torch.cuda.device(device):
                        torch.cuda.init()  # the context the functions load into is torch's
                        module = _core.Module(self._cubin)
                        fns = tuple(module.function(n) for n in self._names)
                    self._loaded[device] = fns
        return fns


def current_stream(device) -> int:
    """The handle of torch's current stream on ``device`` (a ``torch.device`` with an index, or the index), for a
    launch. torch's private accessor takes ~0.3 us, ``torch.cuda.current_stream(device).cuda_stream`` ~3 us: this is
    on every op call's path."""
    import torch

    index = device if isinstance(device, int) else device.index
    try:
        return int(torch._C._cuda_getCurrentRawStream(index))
    except AttributeError:  # a torch without the accessor
        return int(torch.cuda.current_stream(index).cuda_stream)
