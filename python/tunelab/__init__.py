"""tunelab: tune CUDA kernels honestly.

Every candidate is gated before it costs GPU time, checked for correctness, timed with one sound protocol,
and a winner is only declared with bootstrap confidence intervals against the strongest baseline.

Importing tunelab needs neither a GPU nor a driver nor torch: compiling (NVRTC), resource gates and static
occupancy work anywhere; launching and timing need an NVIDIA GPU.
"""
from __future__ import annotations

__version__ = "0.1.0"

from tunelab import _core, ops, timing  # noqa: E402  (ops imports torch only when an op is first looked up)
from tunelab.errors import (  # noqa: E402
    CompileError, ConfigError, DriverError, GateRejection, InputError, NoDeviceError, PoisonedContextError,
    TunelabError,
)
from tunelab.kernel import CompiledKernel, Kernel, current_arch  # noqa: E402
from tunelab.paths import cache_dir, kernels_dir  # noqa: E402


def compile(source: str, name_expressions=(), arch: str = "sm_90", **kwargs):
    """Compile CUDA C++ with NVRTC for ``arch``; see :func:`tunelab._core.compile` for the options.

    Returns a ``CompileResult`` with ``cubin``, ``lowered_names``, per-kernel ``resources`` (registers,
    static shared memory, spill bytes, stack), ``log`` and ``cache_hit``. Works without a GPU.
    """
    return _core.compile(source, list(name_expressions), arch, **kwargs)


def occupancy(arch: str, threads: int, registers: int, smem_bytes: int = 0):
    """Static occupancy of a block of ``threads`` threads using ``registers`` registers per thread and
    ``smem_bytes`` of shared memory (static + dynamic) on ``arch``, from the toolkit's cuda_occupancy.h."""
    return _core.occupancy(arch, threads, registers, smem_bytes)


def devices() -> list[dict]:
    """Properties of every visible CUDA device (raises NoDeviceError without a driver)."""
    return [_core.device_info(i) for i in range(_core.device_count())]


def gpu_available() -> tuple[bool, str]:
    """(True, "") when a CUDA driver and at least one GPU are usable, else (False, the reason)."""
    ok, why = _core.driver_available()
    if ok and _core.device_count() == 0:
        return False, "the CUDA driver is loaded but sees no GPU"
    return bool(ok), why


def tune(*args, **kwargs):
    """Tune a kernel family for a problem; see :func:`tunelab.tuning.tune`."""
    from tunelab.tuning import tune as _tune
    return _tune(*args, **kwargs)


__all__ = [
    "__version__", "ops", "timing", "Kernel", "CompiledKernel", "compile", "occupancy", "devices", "gpu_available", "current_arch",
    "tune", "cache_dir", "kernels_dir", "TunelabError", "CompileError", "ConfigError", "DriverError",
    "NoDeviceError", "PoisonedContextError", "InputError", "GateRejection",
]
