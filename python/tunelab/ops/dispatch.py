"""Which config an op runs when the caller gives none: the tuned-config store's entry for this GPU and the
problem's bucket (``tunelab.tuning.store``), else the family's documented default. One cache per process for
every op; it is dropped when this process writes the store (``tune()``, ``tunelab import``), and
:func:`clear_caches` forgets it (e.g. after another process wrote the store). Compiled kernels stay loaded.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable, Hashable, Mapping

from tunelab.errors import TunelabError

_CACHE: dict[tuple, tuple[dict, str]] = {}
_ON_CLEAR: list[Callable[[], None]] = []


def device_name(index: int) -> str:
    """The CUDA device's name, as the store keys devices."""
    import torch

    return torch.cuda.get_device_name(index)


def resolve(family: str, device_index: int, problem: Callable[[], Mapping[str, Any]], key: Hashable,
            adapt: Callable[[dict], dict], default: Callable[[], dict]) -> tuple[dict, str]:
    """``(config, source)``: the stored config passed through ``adapt`` (source ``"store"``), or ``default()``
    (source ``"default"``) when there is none, it is stale, or ``adapt`` rejects it.

    ``family``: the family name (the store imports the family when it needs its bucket rule). ``problem``: makes the
    store's problem dict, called only on a cache miss (resolve() is on every op call's path).
    ``key`` starts with the op's name and holds every input that ``adapt`` and ``default`` read besides the stored
    entry (exact k, nq, ...) and the store bucket's inputs: the result is cached under it until this process writes
    the store.
    """
    full_key = (device_index, key)
    hit = _CACHE.get(full_key)
    if hit is not None:
        return dict(hit[0]), hit[1]
    cfg, source = None, "default"
    try:
        from tunelab.tuning import store
    except ImportError:
        store = None
    if store is not None:
        store.on_write(clear_caches)
        try:
            found = store.lookup(family, device_name(device_index), problem())
        except TunelabError as exc:
            warnings.warn(f"the tuned-config store could not be read ({exc}); using the default config",
                          stacklevel=3)
            found = None
        if found is not None:
            try:
                cfg, source = adapt(found), "store"
            except TunelabError as exc:
                warnings.warn(f"the stored config {found} does not fit this call ({exc}); using the default config "
                              f"(re-tune this shape with `tunelab tune {family} ...` to store one that fits)",
                              stacklevel=3)
                cfg = None
    if cfg is None:
        cfg = default()
    _CACHE[full_key] = (cfg, source)
    return dict(cfg), source


def on_clear(callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever the resolved configs are forgotten (:func:`clear_caches`, a store write): an op
    that caches more per resolved config (the search's call shapes) drops it with them. Once per callback."""
    if callback not in _ON_CLEAR:
        _ON_CLEAR.append(callback)


def clear_caches() -> None:
    """Forget every op's resolved configs (and what the ops cached from them: :func:`on_clear`)."""
    _CACHE.clear()
    for callback in _ON_CLEAR:
        callback()
