"""Environment fingerprint recorded with every measurement, so a figure can be traced to what produced it."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from tunelab import __version__


def git_commit() -> str | None:
    """The git commit of the tunelab checkout in use (or of the current directory), with '+dirty' if modified.

    Only a repository that holds tunelab's sources (``python/tunelab``) counts: an installed copy can sit inside
    another repository (a pyenv checkout holds site-packages), whose commit says nothing about tunelab.
    ``TUNELAB_GIT_COMMIT`` overrides the lookup (a checkout copied without ``.git``, as on a GPU machine).
    """
    override = os.environ.get("TUNELAB_GIT_COMMIT")
    if override:
        return override
    candidates = [Path(__file__).resolve().parents[2], Path.cwd()]
    for where in candidates:
        try:
            top = subprocess.run(["git", "-C", str(where), "rev-parse", "--show-toplevel", "HEAD"],
                                 capture_output=True, text=True, timeout=5)
            if top.returncode != 0:
                continue
            root, commit = top.stdout.splitlines()[:2]
            if not (Path(root) / "python" / "tunelab" / "__init__.py").is_file():
                continue
            dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5)
            return commit + ("+dirty" if dirty.stdout.strip() else "")
        except (OSError, subprocess.SubprocessError, ValueError):
            continue
    return None


def sm_clocks(device: int = 0) -> dict[str, Any] | None:
    """Current and maximum SM/memory clocks (MHz) and throttle reasons from NVML, or None without NVML."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(device)
        out = {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "sm_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
        }
        try:
            out["throttle_reasons"] = int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(h))
        except Exception:  # older NVML
            out["throttle_reasons"] = None
        return out
    except Exception:
        return None


def fingerprint(device: int = 0) -> dict[str, Any]:
    """Everything that identifies where and with what a measurement was taken.

    GPU name, UUID, arch and clocks (when a GPU is present), driver, NVRTC and torch versions, tunelab's
    version and git commit, Python and platform, and the UTC time.
    """
    from tunelab import _core

    info: dict[str, Any] = {
        "time_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "tunelab_version": __version__,
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": platform.node(),
        "nvrtc_version": _core.nvrtc_version(),
        "nvrtc_library": _core.nvrtc_library_path(),
    }
    ok, why = _core.driver_available()
    info["driver_available"] = ok
    if ok:
        v = _core.driver_version()
        info["cuda_driver_api"] = f"{v // 1000}.{(v % 1000) // 10}"
        try:
            d = _core.device_info(device)
            info["gpu"] = {k: d[k] for k in ("name", "uuid", "arch", "sm_count", "l2_bytes", "total_memory",
                                             "sm_clock_khz", "memory_clock_khz")}
        except Exception as exc:  # a poisoned context must not hide the rest of the fingerprint
            info["gpu_error"] = str(exc)
        info["clocks"] = sm_clocks(device)
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            info["nvidia_driver"] = out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
        except (OSError, subprocess.SubprocessError, IndexError):
            info["nvidia_driver"] = None
    else:
        info["driver_unavailable_reason"] = why
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.version.cuda
        info["cudnn"] = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    except ImportError:
        info["torch"] = None
    return info
