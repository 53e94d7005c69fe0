"""One exception hierarchy for tunelab.

Every user-facing error names the bad value, the accepted values and what to do about it. The C++ core raises
these same classes (the bindings map C++ exceptions onto them), so ``except tunelab.TunelabError`` catches
everything the package raises on purpose.
"""
from __future__ import annotations


class TunelabError(Exception):
    """Base class of every error tunelab raises on purpose."""


class CompileError(TunelabError):
    """NVRTC rejected a kernel source. ``log`` holds the full compiler log, ``options`` the flags used."""

    def __init__(self, message: str, log: str = "", options: list[str] | None = None, config: dict | None = None):
        super().__init__(message)
        self.log = log
        self.options = list(options or [])
        self.config = dict(config or {})

    def __str__(self) -> str:
        text = super().__str__()
        if self.config:
            text += f"\nconfig: {self.config}"
        if self.log and self.log not in text:
            text += f"\n--- NVRTC log ---\n{self.log.rstrip()}"
        return text


class DriverError(TunelabError):
    """A CUDA driver call failed. ``call`` names the driver function, ``code`` is the CUresult."""

    def __init__(self, message: str, call: str = "", code: int = 0):
        super().__init__(message)
        self.call = call
        self.code = code


class NoDeviceError(DriverError):
    """No usable CUDA driver or GPU: the operation needs one (compiling and occupancy do not)."""


class PoisonedContextError(DriverError):
    """A kernel hit a sticky error (illegal address, trap, misaligned access).

    The CUDA context of this process is unusable from now on: every later CUDA call in this process fails,
    torch's included. Restart the process (the tuner runs candidates in a worker subprocess for this reason).
    """


class ConfigError(TunelabError, ValueError):
    """A kernel config or option has a value outside the accepted set."""


class InputError(TunelabError, ValueError):
    """A tensor or argument passed to an op is not accepted (device, dtype, shape, stride)."""


class GateRejection(TunelabError):
    """A candidate config was rejected by a gate; ``code`` is the reason code (e.g. ``static.smem``)."""

    def __init__(self, code: str, detail: str):
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


__all__ = [
    "TunelabError", "CompileError", "DriverError", "NoDeviceError", "PoisonedContextError",
    "ConfigError", "InputError", "GateRejection",
]
