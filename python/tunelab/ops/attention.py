"""``tunelab.ops.attention``: FlashAttention-2-style forward attention on tensor cores (sm_80 and newer).

::

    out = tunelab.ops.attention(q, k, v, causal=True)                   # q, k, v: (B, H, S, D) fp16/bf16
    out, lse = tunelab.ops.attention(q, k, v, return_lse=True)
    out = tunelab.ops.attention(q, k, v, layout="bshd")                 # (B, S, H, D) tensors, no copies

``out = softmax(scale * q @ k^T + mask) @ v`` per (batch, head), accumulated in fp32. The kernel is the portable
``mma.sync`` path (``csrc/kernels/attention/fwd.cuh``), compiled at run time with NVRTC for the GPU's arch.

Semantics worth knowing:

* **Causal alignment.** ``causal=True`` (or ``"bottom_right"``) aligns the mask to the bottom-right corner like
  FlashAttention-2 and ``torch.nn.attention.bias.causal_lower_right``: query ``i`` sees key ``j`` iff
  ``j <= i + Sk - Sq``. This differs from SDPA's ``is_causal=True`` when ``Sq != Sk``: SDPA aligns to the
  top-left (``j <= i``), available here as ``causal="top_left"``. For ``Sq == Sk`` they coincide.
* **Rows that see no key** (bottom-right causal with ``Sq > Sk``: the first ``Sq - Sk`` rows) get output 0 and
  LSE ``-inf``, as torch's SDPA returns with an explicit ``causal_lower_right`` mask.
* **LSE** is the natural-log logsumexp of the scaled scores, fp32, shape (B, H, Sq).
* **Scale** defaults to ``1/sqrt(D)`` and must be finite and positive.
* Forward only (no autograd).

Config: without ``config`` the op uses the tuned config stored for this device and shape bucket (filled by
``tunelab tune attention``), else the documented default of :func:`default_config`. A config is a dict of the
tunables listed in :data:`PARAM_NAMES`; see ``tunelab.tuning.families.attention`` for what each one does.

The op is registered as the torch custom op ``torch.ops.tunelab.attention`` with a fake implementation, so it
works under ``torch.compile`` and inside CUDA graphs (compile and load a config once before capturing).
"""
from __future__ import annotations

import math
import threading
import sys
import types
from dataclasses import dataclass
from typing import Any, Mapping

from tunelab import _core
from tunelab.ops import config as _config
from tunelab.kernel import smem_limit
from tunelab.ops import dispatch as _dispatch
from tunelab.ops import eager as _eager
from tunelab.ops.loading import DeviceFunctions, current_stream
from tunelab.errors import ConfigError, InputError

#: Head dims the kernel supports (32 and 96 and 256 included: every tunable combination that fits is valid).
SUPPORTED_HEAD_DIMS: tuple[int, ...] = tuple(_core.attention.head_dims())
#: The tunables of a config, in the kernel's template-argument order.
PARAM_NAMES: tuple[str, ...] = tuple(_core.attention.param_names())
#: Values each tunable accepts on its own (cross-parameter rules: ``_core.attention.validate``).
PARAM_CHOICES: dict[str, tuple[int, ...]] = {k: tuple(v) for k, v in _core.attention.param_choices().items()}
DTYPE_CODES = {"float16": 0, "bfloat16": 1}

_SOURCE = '#include "attention/fwd.cuh"\n'


def _cfg(bm, bn, warps, stages, swizzle, vec, q_regs, unroll, kv_split) -> dict[str, int]:
    return dict(BLOCK_M=bm, BLOCK_N=bn, NUM_WARPS=warps, STAGES=stages, SWIZZLE=swizzle, VEC_LOAD=vec,
                Q_IN_REGS=q_regs, UNROLL=unroll, KV_SPLIT_WARPS=kv_split)


# Defaults per head dim, chosen without a tuned store (FlashAttention-2's tile shapes, which keep the
# accumulators of a 4-warp, 128-row block in registers without spilling):
#   D<=64:  128x64 tiles, 4 warps (32 query rows each), Q fragments kept in registers.
#   D=96/128: 128x64, 4 warps, Q re-read from shared memory (O alone is 96/128 registers per thread).
#   D=256:  64x64, 4 warps (16 rows each): O is 128 registers per thread.
# On sm_8x the D=96/128 tiles drop to BLOCK_N=32: ptxas for sm_80 needs a few more registers for the
# 128x64 body and spills; on sm_86/sm_89 (99 KiB of shared memory) D=256 drops to 64x32 (96 KiB).
# Every default compiles without spills for sm_80 and sm_90 (tests check it).
_DEFAULTS: dict[int, dict[str, int]] = {
    32: _cfg(128, 128, 4, 2, 1, 16, 1, 0, 1),
    64: _cfg(128, 64, 4, 2, 1, 16, 1, 0, 1),
    96: _cfg(128, 64, 4, 2, 1, 16, 0, 0, 1),
    128: _cfg(128, 64, 4, 2, 1, 16, 0, 0, 1),
    256: _cfg(64, 64, 4, 2, 1, 16, 0, 0, 1),
}
_DEFAULTS_SM8X: dict[int, dict[str, int]] = {
    96: _cfg(128, 32, 4, 2, 1, 16, 0, 0, 1),
    128: _cfg(128, 32, 4, 2, 1, 16, 0, 0, 1),
}
_DEFAULTS_SMALL_SMEM: dict[int, dict[str, int]] = {256: _cfg(64, 32, 4, 2, 1, 16, 0, 0, 1)}


def default_config(head_dim: int, dtype: str = "float16", causal: bool = False, arch: str | None = None) -> dict:
    """The documented default config for a head dim (and arch: ``sm_8x`` gets narrower KV tiles at D>=96).

    Used when no tuned config is stored for the device and shape bucket. ``dtype`` and ``causal`` do not change
    the default today; they are accepted so the rule can grow without changing callers.
    """
    _check_head_dim(head_dim)
    cfg = _DEFAULTS[head_dim]
    if arch is not None and arch.startswith("sm_8"):
        cfg = _DEFAULTS_SM8X.get(head_dim, cfg)
        # sm_86/sm_89 have 99 KiB of shared memory per block: D=256 needs the 64x32 tile there
        if _core.attention.smem_bytes(cfg, head_dim, DTYPE_CODES.get(dtype, 0)) > smem_limit(arch):
            cfg = _DEFAULTS_SMALL_SMEM[head_dim]
    return dict(cfg)


def _check_head_dim(head_dim: int) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise InputError(f"head dim {head_dim} is not supported by the attention kernel; supported head dims are "
                         f"{list(SUPPORTED_HEAD_DIMS)}")


def canonical_config(config: Mapping[str, Any]) -> dict[str, int]:
    """``config`` as a plain dict of ints in :data:`PARAM_NAMES` order; ConfigError for unknown, missing or
    out-of-range values (cross-parameter rules are checked when compiling)."""
    return _config.canonical(config, PARAM_NAMES, PARAM_CHOICES, "attention")


def config_string(config: Mapping[str, Any]) -> str:
    """Compact identity of a config: ``"BLOCK_M=128,BLOCK_N=64,..."`` in :data:`PARAM_NAMES` order."""
    return _config.to_string(canonical_config(config), PARAM_NAMES)


def parse_config_string(text: str) -> dict[str, int]:
    """Inverse of :func:`config_string`."""
    return canonical_config(_config.from_string(text))


# ------------------------------------------------------------------------------------------- compile & launch
@dataclass
class CompiledAttention:
    """One attention config compiled for one arch: cubin, ptxas resources, launch geometry, loaded functions."""

    config: dict
    dtype: str
    head_dim: int
    causal: bool
    arch: str
    name_expression: str
    lowered_name: str
    result: Any  # _core.CompileResult
    smem_bytes: int
    threads: int

    def __post_init__(self):
        self._loaded = DeviceFunctions(self.result.cubin, [self.lowered_name])

    @property
    def resources(self):
        """ptxas's report for the kernel (registers, static smem, spill bytes, stack)."""
        return self.result.resources[self.name_expression]

    @property
    def dtype_code(self) -> int:
        """The kernel's dtype code (:data:`DTYPE_CODES`: float16 0, bfloat16 1)."""
        return DTYPE_CODES[self.dtype]

    def function(self, device: int = 0):
        """The loaded kernel on CUDA device ``device`` (loaded once per device; needs a GPU)."""
        return self._loaded.get(device)[0]

    def launch_args(self, q, k, v, out, lse, causal_offset: int, scale: float):
        """(grid, block, smem, ArgPack) for tensors in the (B, H, S, D) logical layout (any strides)."""
        B, H, Sq, D = q.shape
        Sk = k.shape[2]
        c = _core.attention
        blob = c.pack(self.config, self.head_dim, self.dtype_code, q.data_ptr(), k.data_ptr(), v.data_ptr(),
                      out.data_ptr(), 0 if lse is None else lse.data_ptr(), list(q.stride()[:3]),
                      list(k.stride()[:3]), list(v.stride()[:3]), list(out.stride()[:3]), B, H, Sq, Sk,
                      int(causal_offset), float(scale))
        pack = _core.ArgPack()
        pack.raw(blob, 8)
        return c.grid(self.config, B, H, Sq), (self.threads, 1, 1), self.smem_bytes, pack

    def launch(self, q, k, v, out, lse, causal_offset: int, scale: float, stream: int | None = None) -> None:
        """Launch on ``stream`` (default: torch's current stream of q's device)."""
        import torch

        grid, block, smem, pack = self.launch_args(q, k, v, out, lse, causal_offset, scale)
        dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
        if stream is None:
            stream = current_stream(q.device)
        self.function(dev).launch(grid, block, smem, stream, pack)

    def prepare(self, q, k, v, out, lse, causal_offset: int, scale: float):
        """A ``_core.PreparedLaunch`` for the timer (same launch, resolved once)."""
        grid, block, smem, pack = self.launch_args(q, k, v, out, lse, causal_offset, scale)
        dev = q.device.index if q.device.index is not None else 0
        return self.function(dev).prepare(grid, block, smem, pack)


_COMPILED: dict[tuple, CompiledAttention] = {}
_COMPILED_LOCK = threading.Lock()


def compile_config(config: Mapping[str, Any], *, head_dim: int, dtype: str = "float16", causal: bool = False,
                   arch: str | None = None, use_cache: bool = True) -> CompiledAttention:
    """Compile ``config`` with NVRTC for ``arch`` (default: the current GPU's) once per process.

    The shared-memory formula of the launcher is passed as ``TUNELAB_EXPECTED_SMEM``; the kernel
    static_asserts that its own layout needs exactly that, so the two can never disagree silently.
    Raises ConfigError for an invalid config and CompileError when NVRTC fails. Needs no GPU.
    """
    from tunelab.kernel import current_arch
    from tunelab.paths import kernels_dir

    if dtype not in DTYPE_CODES:
        raise InputError(f"dtype {dtype!r} is not supported; supported dtypes are {list(DTYPE_CODES)}")
    _check_head_dim(head_dim)
    cfg = canonical_config(config)
    arch = arch or current_arch()
    key = (tuple(cfg.values()), head_dim, dtype, bool(causal), arch)
    hit = _COMPILED.get(key)
    if hit is not None:
        return hit
    c = _core.attention
    code = DTYPE_CODES[dtype]
    c.validate(cfg, head_dim, code)
    expr = c.name_expression(cfg, code, head_dim, bool(causal))
    smem = int(c.smem_bytes(cfg, head_dim, code))
    from tunelab.errors import CompileError

    try:
        result = _core.compile(_SOURCE, [expr], arch, [], {"TUNELAB_EXPECTED_SMEM": str(smem)}, {},
                               [str(kernels_dir())], 0, use_cache)
    except CompileError as exc:
        exc.config = dict(cfg)
        raise
    compiled = CompiledAttention(cfg, dtype, head_dim, bool(causal), arch, expr, result.lowered_names[expr], result,
                                 smem + int(result.resources[expr].static_smem_bytes), int(c.threads(cfg)))
    with _COMPILED_LOCK:
        return _COMPILED.setdefault(key, compiled)


def source_hash() -> str:
    """SHA-256 (16 hex digits) of the attention kernel sources: every .cuh under attention/ and common/."""
    from tunelab.paths import kernel_source_hash

    return kernel_source_hash("attention", "common")


# ------------------------------------------------------------------------------------------------ the op
def _dtype_name(t) -> str:
    # str(t.dtype) would do, but a dict lookup keyed by the dtype also traces under torch.compile
    return _TORCH_DTYPES.get(t.dtype) or str(t.dtype).replace("torch.", "")


def _torch_dtypes() -> dict:
    try:
        import torch
    except ImportError:
        return {}
    return {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}


_TORCH_DTYPES = _torch_dtypes()


def _causal_align(causal: Any) -> tuple[bool, int]:
    """(is_causal, align): align 0 = bottom-right, 1 = top-left."""
    if causal is False or causal is None:
        return False, 0
    if causal is True or causal == "bottom_right":
        return True, 0
    if causal == "top_left":
        return True, 1
    raise InputError(f"causal={causal!r} is not accepted; use False, True (= 'bottom_right') or 'top_left'")


def _validate_inputs(q, k, v, layout: str):
    """Return (q, k, v) as (B, H, S, D) views (no copies), raising InputError for anything unsupported."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise InputError(f"{name} must be a torch.Tensor; got {type(t).__name__}")
        if t.dim() != 4:
            shape = "(B, S, H, D)" if layout == "bshd" else "(B, H, S, D)"
            raise InputError(f"{name} has rank {t.dim()} (shape {tuple(t.shape)}); attention takes rank-4 tensors "
                             f"{shape}")
        if t.device.type != "cuda":
            raise InputError(f"{name} is on {t.device}; tunelab.ops.attention runs on CUDA tensors: move the "
                             f"inputs with .cuda()")
        if _dtype_name(t) not in DTYPE_CODES:
            raise InputError(f"{name} has dtype {_dtype_name(t)}; accepted dtypes are {list(DTYPE_CODES)}")
    if not (q.device == k.device == v.device):
        raise InputError(f"q, k, v are on different devices ({q.device}, {k.device}, {v.device}); put them on one GPU")
    if not (q.dtype == k.dtype == v.dtype):
        raise InputError(f"q, k, v have different dtypes ({_dtype_name(q)}, {_dtype_name(k)}, {_dtype_name(v)}); "
                         "use one of float16 or bfloat16 for all three")
    if layout == "bshd":
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    elif layout != "bhsd":
        raise InputError(f"layout={layout!r} is not accepted; use 'bhsd' (B, H, S, D) or 'bshd' (B, S, H, D)")
    B, H, Sq, D = q.shape
    if k.shape != v.shape:
        raise InputError(f"k and v must have the same shape; got k {tuple(k.shape)} and v {tuple(v.shape)} "
                         f"(layout {layout})")
    if k.shape[0] != B or k.shape[1] != H or k.shape[3] != D:
        raise InputError(f"q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch, heads or head dim "
                         f"(layout {layout}); only the sequence length may differ")
    _check_head_dim(int(D))
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(3) != 1:
            raise InputError(f"{name} has stride {t.stride(3)} in its last (head) dimension; the head dim must be "
                             f"contiguous (stride 1): call .contiguous() on {name}")
    if k.shape[2] == 0:
        raise InputError("k and v have sequence length 0; attention needs at least one key")
    return q, k, v


def attention(q, k, v, *, causal: bool | str = False, scale: float | None = None,
              config: Mapping[str, Any] | None = None, return_lse: bool = False, layout: str = "bhsd"):
    """Scaled dot-product attention forward: ``softmax(scale * q k^T + causal mask) v``.

    Args:
        q: queries, (B, H, Sq, D) (or (B, Sq, H, D) with ``layout="bshd"``), float16 or bfloat16, on a GPU; any
            strides as long as the head dim is contiguous (a (B, S, H, D) tensor viewed as (B, H, S, D) is read in
            place, without a copy).
        k, v: keys and values, (B, H, Sk, D) in the same layout, dtype and device as ``q``.
        causal: False; True or ``"bottom_right"`` (query i sees keys j <= i + Sk - Sq, FlashAttention-2 and
            ``causal_lower_right``); ``"top_left"`` (j <= i, SDPA's ``is_causal=True``).
        scale: softmax scale, default ``1/sqrt(D)``; must be finite and > 0.
        config: kernel config (dict of :data:`PARAM_NAMES`); default: stored tuned config, else
            :func:`default_config`.
        return_lse: also return the fp32 log-sum-exp (B, H, Sq) of the scaled scores (natural log).
        layout: ``"bhsd"`` (default, SDPA's convention) or ``"bshd"``; the output has q's logical layout.

    Returns:
        ``out`` with q's shape and dtype (and q's memory order when q is dense), or ``(out, lse)``.

    Raises:
        InputError: CPU tensors, mixed devices or dtypes, unsupported head dim, wrong rank, mismatched shapes,
            non-contiguous head dim, bad scale, misaligned pointers for an explicit config, or a working set that
            does not fit in free GPU memory. ConfigError: a bad ``config``.
    """
    import torch

    q4, k4, v4 = _validate_inputs(q, k, v, layout)
    is_causal, align = _causal_align(causal)
    D = q4.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(D)
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise InputError(f"scale={scale!r} is not accepted; the softmax scale must be finite and > 0")
    cfg = "" if config is None else config_string(config)
    B, H, Sq, _ = q4.shape
    if B == 0 or H == 0 or Sq == 0:
        out = torch.empty_like(q)
        lse = q.new_empty((B, H, Sq) if return_lse else (0,), dtype=torch.float32)
        return (out, lse) if return_lse else out
    out, lse = _eager.call("attention", _run, q4, k4, v4, is_causal, align, scale, cfg, bool(return_lse))
    if layout == "bshd":
        out = out.transpose(1, 2)
    return (out, lse) if return_lse else out


# -- config resolution at dispatch ----------------------------------------------------------------------------
def resolve_config(device_index: int, *, head_dim: int, dtype: str, causal: bool, seq_q: int, seq_k: int,
                   batch: int = 1, heads: int = 1) -> tuple[dict, str]:
    """The config the op uses without an explicit one, and where it came from (``"store"`` or ``"default"``).

    Looks up the tuned-config store (``tunelab.tuning.store``) for this device and shape bucket; cached per
    process and bucket until this process writes the store (``clear_caches()`` forgets it, e.g. after another
    process wrote the store).
    """
    from tunelab.kernel import current_arch
    from tunelab.tuning.family import next_pow2

    def problem():
        return dict(batch=batch, heads=heads, seq_q=seq_q, seq_k=seq_k, head_dim=head_dim, dtype=dtype,
                    causal=bool(causal))

    return _dispatch.resolve("attention", device_index, problem,
                             ("attention", head_dim, dtype, bool(causal), next_pow2(seq_q), next_pow2(seq_k)),
                             canonical_config,
                             lambda: default_config(head_dim, dtype, causal, arch=current_arch(device_index)))


def clear_caches() -> None:
    """Forget resolved configs of every op (compiled kernels stay loaded)."""
    _dispatch.clear_caches()


def _fit_vec_load(cfg: dict, q, k, v) -> dict:
    """Lower VEC_LOAD when the inputs' alignment does not allow the configured width (non-explicit configs)."""
    allowed = _core.attention.max_vec_load([q.data_ptr(), k.data_ptr(), v.data_ptr()],
                                           list(q.stride()[:3]) + list(k.stride()[:3]) + list(v.stride()[:3]))
    if allowed == 0:
        raise InputError("q, k, v are not even 4-byte aligned (pointers or strides); call .contiguous()")
    if cfg["VEC_LOAD"] > allowed:
        cfg = dict(cfg, VEC_LOAD=allowed)
    return cfg


def _allocate(q, return_lse: bool):
    import torch

    B, H, Sq, _ = q.shape
    try:
        out = torch.empty_like(q)
        lse = q.new_empty((B, H, Sq) if return_lse else (0,), dtype=torch.float32)
    except torch.OutOfMemoryError as exc:
        need = q.numel() * q.element_size() + (B * H * Sq * 4 if return_lse else 0)
        free = torch.cuda.mem_get_info(q.device)[0]
        raise InputError(f"attention needs {need / 2**20:.1f} MiB for its output{' and LSE' if return_lse else ''} "
                         f"but only {free / 2**20:.1f} MiB are free on {q.device}; reduce the batch or sequence "
                         "length or free GPU memory") from exc
    return out, lse


def _run(q, k, v, causal: bool, causal_align: int, scale: float, config: str, return_lse: bool):
    import torch

    dev = q.device.index if q.device.index is not None else torch.cuda.current_device()
    B, H, Sq, D = q.shape
    Sk = k.shape[2]
    dtype = _dtype_name(q)
    if config:
        cfg = parse_config_string(config)
    else:
        cfg, _ = resolve_config(dev, head_dim=D, dtype=dtype, causal=causal, seq_q=Sq, seq_k=Sk, batch=B, heads=H)
        cfg = _fit_vec_load(cfg, q, k, v)
    from tunelab.kernel import current_arch

    arch = current_arch(dev)
    compiled = compile_config(cfg, head_dim=D, dtype=dtype, causal=causal, arch=arch)
    limit = smem_limit(arch)
    if compiled.smem_bytes > limit:
        raise ConfigError(f"attention config {config_string(cfg)} needs {compiled.smem_bytes} bytes of shared memory "
                          f"per block; {arch} allows {limit}: use smaller BLOCK_M/BLOCK_N/STAGES")
    out, lse = _allocate(q, return_lse)
    offset = (Sk - Sq) if causal_align == 0 else 0
    compiled.launch(q, k, v, out, lse if return_lse else None, offset, scale)
    return out, lse


def _register_custom_op() -> None:
    try:
        import torch
    except ImportError:  # the op needs torch; the rest of this module does not
        return
    # explicit schema: this module uses postponed annotations, which infer_schema cannot resolve
    schema = ("(Tensor q, Tensor k, Tensor v, bool causal, int causal_align, float scale, str config, "
              "bool return_lse) -> (Tensor, Tensor)")

    @torch.library.custom_op("tunelab::attention", mutates_args=(), device_types="cuda", schema=schema)
    def _attention_op(q, k, v, causal, causal_align, scale, config, return_lse):
        return _run(q, k, v, causal, causal_align, scale, config, return_lse)

    @_attention_op.register_fake
    def _attention_fake(q, k, v, causal, causal_align, scale, config, return_lse):
        B, H, Sq, _ = q.shape
        out = torch.empty_like(q)
        lse = q.new_empty((B, H, Sq) if return_lse else (0,), dtype=torch.float32)
        return out, lse


_register_custom_op()

__all__ = ["attention", "default_config", "compile_config", "resolve_config", "canonical_config", "config_string",
           "parse_config_string", "source_hash", "clear_caches", "CompiledAttention", "SUPPORTED_HEAD_DIMS",
           "PARAM_NAMES", "PARAM_CHOICES"]


class _CallableModule(types.ModuleType):
    """``tunelab.ops.attention`` is both this module and the op: once the submodule is imported, Python binds
    the package attribute to the module, so the module itself forwards calls to :func:`attention`."""

    def __call__(self, *args, **kwargs):
        return attention(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
