"""The compiled-kernel cache on disk: where it is, what is in it, and clearing it."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tunelab.paths import kernel_cache_dir


@dataclass
class CacheInfo:
    """Summary of the kernel cache: folder, number of entries and their total size."""
    path: Path
    entries: int
    bytes: int


def info() -> CacheInfo:
    """Count the entries of the compiled-kernel cache (``<cache_dir>/kernels``)."""
    root = kernel_cache_dir()
    files = [p for p in root.rglob("*.tlk") if p.is_file()]
    return CacheInfo(root, len(files), sum(p.stat().st_size for p in files))


def clear() -> int:
    """Delete every compiled-kernel cache entry; returns how many were removed. Studies and stores are kept."""
    root = kernel_cache_dir()
    n = sum(1 for p in root.rglob("*.tlk") if p.is_file())
    for child in root.iterdir():
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    return n
