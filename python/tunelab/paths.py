"""Where tunelab keeps its files on disk."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The root of tunelab's on-disk state: compiled kernels, studies, the tuned-config store.

    ``TUNELAB_CACHE_DIR`` wins; otherwise ``$XDG_CACHE_HOME/tunelab``; otherwise ``~/.cache/tunelab``.
    The folder is created on first use.
    """
    override = os.environ.get("TUNELAB_CACHE_DIR")
    if override:
        root = Path(override).expanduser()
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "tunelab"
    root.mkdir(parents=True, exist_ok=True)
    return root


def kernel_cache_dir() -> Path:
    """Folder of the content-addressed compiled-kernel cache (``<cache_dir>/kernels``)."""
    path = cache_dir() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def kernels_dir() -> Path:
    """Folder holding the CUDA sources of the built-in kernel families (installed as package data).

    In an installed package it is ``tunelab/kernels``; in a source checkout used without installing it is
    ``csrc/kernels``.
    """
    here = Path(__file__).resolve().parent
    installed = here / "kernels"
    if installed.is_dir():
        return installed
    source = here.parent.parent / "csrc" / "kernels"
    if source.is_dir():
        return source
    raise FileNotFoundError(
        f"tunelab's kernel sources were not found at {installed} or {source}; reinstall the package "
        "(pip install .) so that tunelab/kernels is installed")


def header_constant(name: str, header: str, root: Path | None = None) -> int:
    """N of the line ``constexpr int NAME = N;`` in the kernel header ``root / header`` (``root`` defaults to
    :func:`kernels_dir`; e.g. ``header_constant("kFilterWarpCount", "similarity/params.cuh")``), for a tool that must
    agree with a kernel's constant instead of writing it again. Raises RuntimeError naming the header and the line it
    expected when the header no longer says so (the constant moved or changed form: update the caller)."""
    import re

    path = Path(root if root is not None else kernels_dir()) / header
    found = re.search(rf"^\s*constexpr int {re.escape(name)} = (\d+);", path.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{header} no longer says 'constexpr int {name} = N;' (read from {path}): update the "
                           f"caller to read {name} from where it is now")
    return int(found.group(1))


def kernel_source_hash(*folders: str) -> str:
    """SHA-256 (16 hex digits) of every ``.cuh`` under the given folders of :func:`kernels_dir`
    (e.g. ``"attention", "common"``): what a tuned-config store entry is checked against for staleness."""
    import hashlib

    root = kernels_dir()
    h = hashlib.sha256()
    for sub in folders:
        for path in sorted((root / sub).glob("*.cuh")):
            h.update(f"{sub}/{path.name}".encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:16]
