"""The baselines tunelab's kernels are measured against, in one registry.

A baseline is ``make(*tensors, **options) -> zero-argument callable`` that launches the library's kernel on
torch's current stream, plus ``supported(...)`` that says whether it can run here (and why not). Families use
:func:`available` to offer every supported baseline to the confirmation step.

Attention: PyTorch SDPA with its own dispatch (``sdpa_default``: what a user gets), and each backend forced
with ``torch.nn.attention.sdpa_kernel``: ``sdpa_cudnn``, ``sdpa_flash``, ``sdpa_efficient``. A forced
backend that cannot serve the inputs (dtype, head dim, arch) is left out, with its reason, rather than
silently falling back to another backend. GEMM-like: ``torch_matmul`` (cuBLAS) and ``torch_topk``
(``topk(Q @ C.T, k)``).

torch is imported lazily: importing tunelab never needs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from tunelab.errors import ConfigError


@dataclass(frozen=True)
class Baseline:
    """One registered baseline."""

    family: str
    name: str
    make: Callable[..., Callable[[], Any]]
    description: str = ""
    supported: Callable[..., tuple[bool, str]] | None = None


_REGISTRY: dict[str, dict[str, Baseline]] = {}


def register(family: str, name: str, make: Callable[..., Callable[[], Any]], description: str = "",
             supported: Callable[..., tuple[bool, str]] | None = None) -> None:
    """Add (or replace) a baseline of ``family``."""
    _REGISTRY.setdefault(family, {})[name] = Baseline(family, name, make, description, supported)


def names(family: str) -> list[str]:
    """Registered baseline names of ``family``."""
    return list(_REGISTRY.get(family, {}))


def get(family: str, name: str) -> Baseline:
    """The baseline ``name`` of ``family``; ConfigError naming the accepted names otherwise."""
    try:
        return _REGISTRY[family][name]
    except KeyError:
        raise ConfigError(f"unknown baseline {name!r} for family {family!r}; accepted: {names(family)}") from None


def available(family: str, *args: Any, **kwargs: Any) -> tuple[dict[str, Callable[[], Any]], dict[str, str]]:
    """Every supported baseline of ``family`` for these inputs: (name -> launch callable, name -> why not).

    A baseline is supported when its ``supported`` check passes and one trial call runs without error (so a
    forced SDPA backend that rejects the inputs is reported instead of failing later in confirmation).
    """
    ok: dict[str, Callable[[], Any]] = {}
    skipped: dict[str, str] = {}
    for name, b in _REGISTRY.get(family, {}).items():
        if b.supported is not None:
            good, why = b.supported(*args, **kwargs)
            if not good:
                skipped[name] = why
                continue
        try:
            fn = b.make(*args, **kwargs)
            fn()
        except Exception as exc:  # noqa: BLE001 - unsupported here; say why
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            continue
        ok[name] = fn
    return ok, skipped


# -- attention ---------------------------------------------------------------------------------------------------
def _sdpa(backend_name: str | None):
    def make(q, k, v, causal: bool = False, scale: float | None = None):
        import torch.nn.functional as F

        if backend_name is None:
            def run():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
            return run
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)

        def run_forced():
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
        return run_forced
    return make


def _sdpa_supported(backend_name: str):
    def supported(q, k, v, causal: bool = False, scale: float | None = None):
        try:
            from torch.nn.attention import SDPBackend
        except ImportError:
            return False, "torch.nn.attention is not available in this torch"
        if not hasattr(SDPBackend, backend_name):
            return False, f"this torch has no SDPBackend.{backend_name}"
        if not q.is_cuda:
            return False, "inputs are not on a CUDA device"
        return True, ""
    return supported


register("attention", "sdpa_default", _sdpa(None), "torch SDPA, torch's own backend choice")
register("attention", "sdpa_cudnn", _sdpa("CUDNN_ATTENTION"), "SDPA forced to cuDNN",
         _sdpa_supported("CUDNN_ATTENTION"))
register("attention", "sdpa_flash", _sdpa("FLASH_ATTENTION"), "SDPA forced to FlashAttention-2",
         _sdpa_supported("FLASH_ATTENTION"))
register("attention", "sdpa_efficient", _sdpa("EFFICIENT_ATTENTION"), "SDPA forced to memory-efficient",
         _sdpa_supported("EFFICIENT_ATTENTION"))


def attention(q, k, v, causal: bool = False, scale: float | None = None):
    """Supported attention baselines for these tensors (B, H, S, D layout): (callables, skipped reasons)."""
    return available("attention", q, k, v, causal=causal, scale=scale)


# -- GEMM-like ---------------------------------------------------------------------------------------------------
def _matmul(a, b, out=None):
    import torch

    if out is None:
        return lambda: torch.matmul(a, b)
    return lambda: torch.matmul(a, b, out=out)


def _topk(queries, corpus, k: int = 10):
    import torch

    return lambda: torch.topk(queries @ corpus.T, k, dim=-1)


register("matmul", "torch_matmul", _matmul, "torch.matmul (cuBLAS)")
register("similarity", "torch_topk", _topk, "torch.topk(Q @ C.T, k) (cuBLAS + torch top-k)")
