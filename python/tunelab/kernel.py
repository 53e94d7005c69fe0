"""``tunelab.Kernel``: any CUDA source, compiled per config, launched with torch tensors and Python scalars.

This is what the built-in kernel families and the tuner build on, and what lets a researcher tune a kernel of
their own::

    src = r'''
    template <int BLOCK>
    __global__ void scale(const float* x, float* y, float a, int n) {
        int i = blockIdx.x * BLOCK + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }'''
    k = tunelab.Kernel(src, "scale<{BLOCK}>",
                       launch=lambda cfg, x, y, a, n: ((n + cfg["BLOCK"] - 1) // cfg["BLOCK"], cfg["BLOCK"], 0))
    k({"BLOCK": 256}, x, y, 2.0, x.numel())

The kernel name may hold ``{PARAM}`` placeholders filled from the config (template instantiation); when it
has none, every config value is passed as a ``-DPARAM=value`` define instead, so macro-style kernels work too.
"""
from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from tunelab import _core
from tunelab.errors import ConfigError, InputError, TunelabError

LaunchRule = Callable[..., Any]

# C++ parameter types -> (kind, ArgPack method, accepted torch dtypes for pointers)
_SCALARS = {
    "int": "i32", "signed int": "i32", "unsigned int": "u32", "unsigned": "u32", "long long": "i64",
    "long": "i64", "long int": "i64", "long long int": "i64", "unsigned long long": "u64",
    "unsigned long": "u64", "unsigned long long int": "u64", "unsigned long int": "u64", "size_t": "u64",
    "int64_t": "i64", "uint64_t": "u64", "int32_t": "i32", "uint32_t": "u32", "float": "f32", "double": "f64",
    "bool": "bool",
}
_POINTEE_DTYPES = {
    "float": ("float32",), "double": ("float64",), "__half": ("float16",), "half": ("float16",),
    "__nv_bfloat16": ("bfloat16",), "nv_bfloat16": ("bfloat16",), "int": ("int32",), "unsigned int": ("int32", "uint32"),
    "long long": ("int64",), "long": ("int64",), "unsigned long long": ("int64", "uint64"), "int64_t": ("int64",),
    "signed char": ("int8",), "char": ("int8", "uint8"), "unsigned char": ("uint8",), "bool": ("bool",),
    "short": ("int16",), "__half2": ("float16",), "float2": ("float32", "complex64"), "float4": ("float32",),
    "void": None,
}


@dataclass(frozen=True)
class Param:
    """One kernel parameter as read from the signature: C++ type, pointer or scalar."""
    type: str
    is_pointer: bool
    pointee: str | None = None


def _split_params(params: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _normalize_type(t: str) -> str:
    t = re.sub(r"\b(const|volatile|__restrict__|__restrict|restrict)\b", " ", t)
    t = re.sub(r"\s+", " ", t).strip()
    return re.sub(r"\s*\*", "*", t)


def parse_param(decl: str, named: bool) -> Param:
    """Parse one parameter declaration (``const float* __restrict__ x`` or ``float const*``)."""
    decl = decl.strip()
    if named:
        # drop the parameter name: the last identifier when the declaration has more than a type
        m = re.match(r"^(.*?[\s\*&])([A-Za-z_]\w*)\s*(\[\s*\])?$", decl)
        if m and _normalize_type(m.group(1)):
            decl = m.group(1) + ("*" if m.group(3) else "")
    t = _normalize_type(decl)
    if t.endswith("*"):
        pointee = _normalize_type(t.rstrip("*").strip())
        return Param(type=t, is_pointer=True, pointee=pointee)
    return Param(type=t, is_pointer=False)


def signature_from_lowered(lowered: str) -> list[Param] | None:
    """Parameter types from a mangled kernel name, or None for an ``extern "C"`` kernel."""
    demangled = _core.demangle(lowered).strip()
    if demangled == lowered or not demangled.endswith(")"):
        return None
    # The parameter list is the balanced (...) group that ends the demangled name.
    depth = 0
    for i in range(len(demangled) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(demangled[i], 0)
        if depth == 0:
            inner = demangled[i + 1:-1]
            break
    else:
        return None
    if inner.strip() in ("", "void"):
        return []
    return [parse_param(p, named=False) for p in _split_params(inner)]


def signature_from_source(source: str, name: str) -> list[Param] | None:
    """Parameter types of ``__global__ void name(...)`` found in the source text, or None if not found."""
    m = re.search(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                  + re.escape(name) + r"\s*\(([^)]*)\)", source)
    if not m:
        return None
    inner = m.group(1).strip()
    if inner in ("", "void"):
        return []
    return [parse_param(p, named=True) for p in _split_params(inner)]


@dataclass
class CompiledKernel:
    """One config of a :class:`Kernel`, compiled for one arch: cubin, resources and (lazily) the loaded function."""
    kernel: "Kernel"
    config: dict
    arch: str
    name_expression: str
    lowered_name: str
    result: Any  # _core.CompileResult
    signature: list[Param] | None
    _function: Any = field(default=None, repr=False)

    @property
    def resources(self):
        """ptxas's resource usage of this kernel (registers, static smem, spills, stack)."""
        return self.result.resources[self.lowered_name]

    @property
    def compile_ms(self) -> float:
        """NVRTC time, or the cache-load time on a cache hit."""
        return self.result.compile_ms

    @property
    def cache_hit(self) -> bool:
        """True when the cubin came from the disk cache."""
        return self.result.cache_hit

    def function(self):
        """The loaded ``_core.Function`` (loads the module on first use; needs a GPU)."""
        if self._function is None:
            module = _core.Module(self.result.cubin)
            self._function = module.function(self.lowered_name)
        return self._function

    def pack(self, args: Sequence[Any]) -> "_core.ArgPack":
        """Convert Python arguments into a kernel argument pack, checking them against the signature."""
        return _pack_args(self, args)

    def launch_dims(self, args: Sequence[Any]) -> tuple[tuple[int, ...], tuple[int, ...], int]:
        """Grid, block and dynamic shared memory from the kernel's launch rule."""
        return _normalize_dims(self.kernel.launch(self.config, *args), self.kernel.name)

    def prepare(self, *args: Any) -> "_core.PreparedLaunch":
        """Resolve everything for a launch with these arguments; the result is what the timer calls."""
        grid, block, smem = self.launch_dims(args)
        return self.function().prepare(grid, block, smem, self.pack(args))

    def __call__(self, *args: Any, stream: int | None = None) -> None:
        grid, block, smem = self.launch_dims(args)
        pack = self.pack(args)  # bad arguments are reported before any GPU work
        if stream is None:
            stream = _torch_stream(args)
        self.function().launch(grid, block, smem, stream, pack)


def _torch_stream(args: Sequence[Any]) -> int:
    try:
        import torch
    except ImportError:
        return 0
    for a in args:
        if isinstance(a, torch.Tensor) and a.is_cuda:
            return int(torch.cuda.current_stream(a.device).cuda_stream)
    return int(torch.cuda.current_stream().cuda_stream) if torch.cuda.is_initialized() else 0


def _normalize_dims(spec: Any, name: str):
    if isinstance(spec, Mapping):
        grid, block, smem = spec.get("grid"), spec.get("block"), spec.get("smem", 0)
    elif isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
        grid, block = spec[0], spec[1]
        smem = spec[2] if len(spec) == 3 else 0
    else:
        raise ConfigError(f"the launch rule of kernel '{name}' returned {spec!r}; it must return "
                          "(grid, block), (grid, block, smem) or a dict with keys grid, block, smem")

    def three(v, what):
        v = (v,) if isinstance(v, int) else tuple(int(x) for x in v)
        if not 1 <= len(v) <= 3 or any(x < 1 for x in v):
            raise ConfigError(f"{what}={v} from the launch rule of '{name}' must be 1 to 3 positive ints")
        return v

    return three(grid, "grid"), three(block, "block"), int(smem)


def _pack_args(ck: CompiledKernel, args: Sequence[Any]):
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency; scalars still work without it
        torch = None
    sig = ck.signature
    name = ck.name_expression
    if sig is not None and len(sig) != len(args):
        raise InputError(f"kernel '{ck.name_expression}' takes {len(sig)} arguments "
                         f"({', '.join(p.type for p in sig)}), got {len(args)}")
    pack = _core.ArgPack()
    device = None
    for i, a in enumerate(args):
        p = sig[i] if sig is not None else None
        where = f"argument {i} of kernel '{name}'" + (f" ({p.type})" if p else "")
        if torch is not None and isinstance(a, torch.Tensor):
            if p is not None and not p.is_pointer:
                raise InputError(f"{where} is a scalar; got a tensor. Pass a Python number")
            if not a.is_cuda:
                raise InputError(f"{where} is a tensor on {a.device}; kernels read GPU memory: move it with .cuda()")
            if device is None:
                device = a.device
            elif a.device != device:
                raise InputError(f"{where} is on {a.device} but an earlier tensor is on {device}: put all on one GPU")
            if p is not None and p.pointee in _POINTEE_DTYPES and _POINTEE_DTYPES[p.pointee] is not None:
                accepted = _POINTEE_DTYPES[p.pointee]
                dt = str(a.dtype).replace("torch.", "")
                if dt not in accepted:
                    raise InputError(f"{where} expects dtype {' or '.join(accepted)}; got {dt}")
            pack.ptr(a.data_ptr())
        elif isinstance(a, bytes):
            pack.raw(a, 8)
        elif isinstance(a, bool) or (p is not None and p.type == "bool"):
            if p is not None and p.is_pointer:
                raise InputError(f"{where} is a pointer; got {type(a).__name__}")
            pack.raw(bytes([1 if a else 0]), 1)
        elif isinstance(a, int):
            kind = _SCALARS.get(p.type) if p is not None else None
            if p is not None and p.is_pointer:
                pack.ptr(a)  # a raw device address
            elif kind in ("f32", "f64"):
                getattr(pack, kind)(float(a))
            elif kind is not None:
                getattr(pack, kind)(a)
            elif p is None:
                pack.i32(a)
            else:
                raise InputError(f"{where}: cannot pass a Python int for C++ type '{p.type}'")
        elif isinstance(a, float):
            kind = _SCALARS.get(p.type) if p is not None else "f32"
            if kind not in ("f32", "f64"):
                raise InputError(f"{where} is '{p.type}'; got a float {a!r}")
            getattr(pack, kind)(a)
        else:
            raise InputError(f"{where}: unsupported argument type {type(a).__name__}; pass torch tensors, "
                             "Python ints/floats/bools, or bytes for a struct passed by value")
    return pack


class Kernel:
    """A tunable CUDA kernel from source: compiled per config with NVRTC, launched with a launch rule.

    Args:
        source: CUDA C++ source text (or a path to a ``.cu`` file).
        name: kernel name; may contain ``{PARAM}`` placeholders filled from the config, e.g. ``"k<{BLOCK}>"``.
        launch: ``launch(config, *args) -> (grid, block[, smem])`` (or a dict with those keys).
        headers: extra in-memory headers ``{include_name: text}``.
        include_dirs: folders added with ``-I`` (their headers are hashed into the cache key).
        options: extra NVRTC options; ``defines``: extra ``-D`` defines.
        config_defines: also pass each config value as ``-DNAME=value``. Default: only when ``name`` has no
            ``{PARAM}`` placeholders, since a define would clash with a template parameter of the same name.
    """

    def __init__(self, source: str | Path, name: str, launch: LaunchRule, *, headers: Mapping[str, str] | None = None,
                 include_dirs: Sequence[str | Path] = (), options: Sequence[str] = (),
                 defines: Mapping[str, Any] | None = None, config_defines: bool | None = None):
        if isinstance(source, Path) or (isinstance(source, str) and source.endswith((".cu", ".cuh"))
                                        and "\n" not in source and Path(source).is_file()):
            source = Path(source).read_text()
        if not isinstance(source, str) or "__global__" not in source:
            raise ConfigError("source must be CUDA C++ text containing a __global__ kernel (or a path to a .cu file)")
        if not callable(launch):
            raise ConfigError("launch must be a callable launch(config, *args) -> (grid, block[, smem])")
        self.source = source
        self.name = name
        self.launch = launch
        self.headers = dict(headers or {})
        self.include_dirs = [str(d) for d in include_dirs]
        self.options = list(options)
        self.defines = {k: str(v) for k, v in (defines or {}).items()}
        self.config_defines = ("{" not in name) if config_defines is None else bool(config_defines)
        self._compiled: dict[tuple, CompiledKernel] = {}
        self._lock = threading.Lock()

    def name_expression(self, config: Mapping[str, Any]) -> str:
        """The kernel name with the config's values substituted into its ``{PARAM}`` placeholders."""
        try:
            return self.name.format(**{k: _cxx_value(v) for k, v in config.items()})
        except KeyError as exc:
            raise ConfigError(f"kernel name '{self.name}' needs config key {exc.args[0]!r}; "
                              f"config has {sorted(config)}") from None

    def source_hash(self) -> str:
        """A hash of everything that defines the kernel's code (source, headers, options, name)."""
        import hashlib
        h = hashlib.sha256()
        for part in (self.source, self.name, repr(sorted(self.headers.items())), repr(self.options),
                     repr(sorted(self.defines.items()))):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:16]

    def compile(self, config: Mapping[str, Any] | None = None, arch: str | None = None, *,
                max_registers: int = 0, use_cache: bool = True) -> CompiledKernel:
        """Compile ``config`` for ``arch`` (default: the current GPU's, else sm_90); returns the compiled
        instance with its resource usage. Raises :class:`tunelab.CompileError` with the full log on failure."""
        config = dict(config or {})
        arch = arch or current_arch()
        key = (tuple(sorted((k, repr(v)) for k, v in config.items())), arch, max_registers)
        with self._lock:
            hit = self._compiled.get(key)
        if hit is not None:
            return hit
        expr = self.name_expression(config)
        defines = dict(self.defines)
        if self.config_defines:
            defines.update({k: _cxx_value(v) for k, v in config.items()})
        from tunelab.errors import CompileError
        try:
            result = _core.compile(self.source, [expr], arch, self.options, defines, self.headers,
                                   self.include_dirs, max_registers, use_cache)
        except CompileError as exc:
            exc.config = config
            raise
        lowered = result.lowered_names[expr]
        base = expr.split("<")[0].split("::")[-1]
        sig = signature_from_lowered(lowered) or signature_from_source(self.source, base)
        ck = CompiledKernel(self, config, arch, expr, lowered, result, sig)
        with self._lock:
            self._compiled.setdefault(key, ck)
        return ck

    def prepare(self, config: Mapping[str, Any], *args: Any) -> "_core.PreparedLaunch":
        """Compile (if needed) and resolve a launch of ``config`` with ``args`` for the timer."""
        return self.compile(config).prepare(*args)

    def __call__(self, config: Mapping[str, Any], *args: Any, stream: int | None = None) -> None:
        """Launch ``config`` with ``args`` (torch CUDA tensors, Python scalars) on torch's current stream."""
        self.compile(config)(*args, stream=stream)


def parse_define(text: str) -> tuple[str, str]:
    """``"MACRO=VALUE"`` (a command line's compile define, e.g. an experiment macro of a kernel header) ->
    ``("MACRO", "VALUE")``, as :class:`Kernel`'s ``defines`` take it. Raises :class:`~tunelab.errors.ConfigError`
    naming the text when the macro or the value is missing or the macro is not a C identifier."""
    key, eq, value = text.partition("=")
    if not eq or not value or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
        raise ConfigError(f"define {text!r}: expected MACRO=VALUE with MACRO a C identifier and a value, "
                          f"e.g. TUNELAB_SIM_FILTER_WAIT_NS=0")
    return key, value


def _cxx_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_ARCH_CACHE: dict[int, str] = {}


@functools.lru_cache(maxsize=None)
def smem_limit(arch: str) -> int:
    """Opt-in shared memory per block of ``arch`` in bytes (sm_80: 163 KiB, sm_86/89: 99 KiB, sm_90: 227 KiB),
    from the core's arch table; works without a GPU."""
    return int(_core.arch_limits(arch)["smem_per_block_optin"])


def current_arch(device: int | None = None) -> str:
    """The arch of the current (or given) GPU, e.g. ``sm_90``; ``sm_90`` when no GPU is present.

    Override with ``TUNELAB_ARCH`` (e.g. ``sm_90a``) to compile for another arch.
    """
    import os
    forced = os.environ.get("TUNELAB_ARCH")
    if forced:
        return forced
    ok, _ = _core.driver_available()
    if not ok:
        return "sm_90"
    if device is None:
        try:
            import torch
            device = torch.cuda.current_device() if torch.cuda.is_available() else 0
        except ImportError:
            device = 0
    if device not in _ARCH_CACHE:
        try:
            _ARCH_CACHE[device] = _core.device_info(device)["arch"]
        except TunelabError:
            return "sm_90"
    return _ARCH_CACHE[device]
