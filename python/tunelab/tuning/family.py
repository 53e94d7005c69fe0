"""What a tunable kernel family provides to the tuner, and the small records that flow through the gates.

A family (attention, similarity, or a user's own kernel through :class:`~tunelab.tuning.kernel_family.KernelFamily`)
implements :class:`TunableFamily`. The required methods raise NotImplementedError here; the optional ones have
defaults here so that a family only overrides what it needs.

A *problem* is what is being tuned for (for attention: batch, heads, sequence length, head dim, dtype, causal).
The tuner treats it as opaque except through :meth:`TunableFamily.problem_dict` (a JSON-ready dict) and
:meth:`TunableFamily.problem_key`; a plain ``dict`` works as a problem out of the box.

Reason codes (``Rejection.code``) are ``<stage>.<what>``; the stage is the gate that rejected the config:

=====================  ==========================================================================
``static.*``           decided from the config and problem alone, before compiling (free)
``compile.error``      NVRTC rejected the instance
``compiled.*``         from ptxas resource usage: registers, spills, occupancy
``numerics.*``         outputs wrong (``error``), NaN/Inf (``nan``) or not fully written (``unwritten``)
``memory.free``        needs more device memory than is free
``runtime.*``          while running: ``trap`` (poisoned context), ``timeout``, ``crash``, ``error``
=====================  ==========================================================================
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tunelab.errors import ConfigError
from tunelab.tuning.space import Config, SearchSpace

#: Element types accepted on the command line (families may accept fewer and say so).
DTYPES = ("fp16", "bf16", "fp32")

#: Gate stages in the order the pipeline applies them.
GATE_ORDER = ("static", "compile", "compiled", "numerics", "memory", "runtime")

#: Reason codes the tuner itself produces or that families are expected to use, with what they mean.
REASON_CODES: dict[str, str] = {
    "static.choice": "a parameter value outside its declared choices",
    "static.constraint": "a search-space constraint is violated",
    "static.smem": "shared memory needed exceeds the device's per-block limit",
    "static.threads": "threads per block exceed the device limit or the tile shape",
    "static.divisibility": "a tile does not divide the work it is assigned",
    "static.problem": "the config cannot serve this problem (shape, dtype, flags)",
    "compile.error": "NVRTC or ptxas rejected the instance",
    "compiled.registers": "registers per thread make the block unlaunchable or exceed the limit",
    "compiled.spills": "ptxas spilled registers to local memory beyond the allowed bytes",
    "compiled.occupancy": "occupancy below the minimum (0 blocks/SM means it cannot launch)",
    "numerics.error": "output error above tolerance against the reference",
    "numerics.nan": "NaN or Inf in the output",
    "numerics.unwritten": "part of the output was never written",
    "memory.free": "needs more device memory than is free",
    "runtime.trap": "the kernel trapped or hit an illegal address (context poisoned; worker restarted)",
    "runtime.timeout": "the measurement did not finish in time (worker killed and restarted)",
    "runtime.crash": "the worker process died while measuring (restarted)",
    "runtime.error": "an exception while launching or timing the candidate",
}


@dataclass(frozen=True)
class Rejection:
    """Why a config was turned away: a reason ``code`` (see :data:`REASON_CODES`) and a human ``detail``."""

    code: str
    detail: str = ""

    @property
    def stage(self) -> str:
        """The gate that produced it: the part of the code before the first dot."""
        return self.code.split(".", 1)[0]

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return {"code": self.code, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.code}: {self.detail}" if self.detail else self.code


@dataclass
class CompiledCandidate:
    """A compiled instance of a config, as the compiled gates see it.

    ``resources`` is the core's ``ResourceUsage`` (or any object/dict with ``registers``, ``spill_store_bytes``,
    ``spill_load_bytes``, ``static_smem_bytes``, ``stack_bytes``). ``smem_bytes`` is static + dynamic shared
    memory per block. ``occupancy`` may be left ``None``: the tuner then asks ``_core.occupancy``.
    ``handle`` is family-private (module, function, lowered name ...) and never leaves the process.
    """

    resources: Any
    threads: int
    smem_bytes: int
    occupancy: Any = None
    arch: str = ""
    compile_ms: float = 0.0
    cache_hit: bool = False
    handle: Any = None

    def resource(self, name: str, default: int = 0) -> int:
        """One field of ``resources``, whether it is an object or a dict."""
        r = self.resources
        if r is None:
            return default
        if isinstance(r, Mapping):
            return int(r.get(name, default))
        return int(getattr(r, name, default))

    def summary(self) -> dict:
        """JSON-ready resources and occupancy (what results files record per trial)."""
        out = {
            "registers": self.resource("registers"),
            "spill_store_bytes": self.resource("spill_store_bytes"),
            "spill_load_bytes": self.resource("spill_load_bytes"),
            "static_smem_bytes": self.resource("static_smem_bytes"),
            "stack_bytes": self.resource("stack_bytes"),
            "threads": int(self.threads),
            "smem_bytes": int(self.smem_bytes),
            "arch": self.arch,
            "compile_ms": float(self.compile_ms),
            "cache_hit": bool(self.cache_hit),
        }
        occ = self.occupancy
        if occ is not None:
            out["occupancy"] = occupancy_dict(occ)
        return out


def occupancy_dict(occ: Any) -> dict:
    """``_core.Occupancy`` (or a dict) as a JSON-ready dict."""
    if isinstance(occ, Mapping):
        return dict(occ)
    return {k: getattr(occ, k) for k in ("blocks_per_sm", "active_warps", "max_warps", "occupancy", "limiter")
            if hasattr(occ, k)}


@dataclass
class NumericsReport:
    """Outcome of the numerics gate.

    ``reason`` is either a reason code (``numerics.nan``) or free text; ``code``/``detail`` normalise it.
    ``errors`` holds the measured errors (e.g. ``max_abs``, ``ref_max_abs`` for PyTorch's own error).
    """

    ok: bool
    reason: str | None = None
    errors: dict[str, float] = field(default_factory=dict)

    @property
    def code(self) -> str | None:
        """Reason code (``numerics.error`` when the family gave free text)."""
        if self.ok:
            return None
        if self.reason and self.reason.startswith("numerics.") and " " not in self.reason.split(":")[0]:
            return self.reason.split(":")[0]
        return "numerics.error"

    @property
    def detail(self) -> str:
        """Human-readable reason."""
        return self.reason or ""


class TunableFamily:
    """Base class (and protocol) of tunable kernel families.

    Required: ``name``, :meth:`space`, :meth:`default_config`, :meth:`compile`, :meth:`make_inputs`,
    :meth:`check`, :meth:`timing_closure`. Everything else has a sensible default.

    Worker processes: measurements run in a spawned subprocess, which must rebuild the family. By default it
    is pickled; a family holding unpicklable state overrides :meth:`worker_ref`.
    """

    name: str = "family"

    # -- required ---------------------------------------------------------------------------------------------
    def space(self, problem: Any) -> SearchSpace:
        """The search space for ``problem``."""
        raise NotImplementedError

    def default_config(self, problem: Any) -> Config:
        """The config used without tuning (what tuning is compared against)."""
        raise NotImplementedError

    def compile(self, config: Config, problem: Any, arch: str) -> CompiledCandidate:
        """Compile ``config`` for ``arch`` (thread-safe; must not need a GPU). Raise CompileError on failure."""
        raise NotImplementedError

    def make_inputs(self, problem: Any, seed: int) -> Any:
        """Random inputs (never zeros) for the problem, on the GPU; also what ``check`` compares against."""
        raise NotImplementedError

    def check(self, config: Config, compiled: CompiledCandidate, inputs: Any) -> NumericsReport:
        """Run the candidate once on ``inputs`` and compare against the reference."""
        raise NotImplementedError

    def timing_closure(self, config: Config, compiled: CompiledCandidate, inputs: Any) -> Callable[[], Any]:
        """A zero-argument callable launching the candidate once on torch's current stream."""
        raise NotImplementedError

    # -- optional ---------------------------------------------------------------------------------------------
    def static_gates(self, config: Config, problem: Any) -> list[Rejection]:
        """Problem-dependent rejections decided before compiling (smem limits, divisibility ...)."""
        return []

    def compiled_gates(self, config: Config, compiled: CompiledCandidate) -> list[Rejection]:
        """Family rules on the compiled candidate, applied after the generic register/spill/occupancy gates
        (e.g. attention's "few resident warps only with a deep pipeline")."""
        return []

    def baselines(self, problem: Any) -> dict[str, Callable[[Any], Callable[[], Any]]]:
        """Baselines to confirm against: name -> ``factory(inputs) -> zero-argument launch callable``.

        Return only the baselines supported for this problem on this machine.
        """
        return {}

    def source_hash(self) -> str:
        """Hash of the kernel sources (and anything else that changes the compiled code)."""
        return ""

    def problem_dict(self, problem: Any) -> dict:
        """JSON-ready description of a problem (dicts and dataclasses work without overriding)."""
        return problem_to_dict(problem)

    def problem_from_dict(self, data: Mapping[str, Any]) -> Any:
        """Inverse of :meth:`problem_dict` (default: the dict itself)."""
        return dict(data)

    def problem_key(self, problem: Any) -> str:
        """Stable identity of a problem used in study names: sorted ``k=v`` pairs of :meth:`problem_dict`."""
        d = self.problem_dict(problem)
        return ",".join(f"{k}={_scalar(d[k])}" for k in sorted(d))

    def problem_from_cli(self, shape: list[int], dtype: str, flags: Mapping[str, Any]) -> Any:
        """Build a problem from ``--shape``, ``--dtype`` and boolean flags (``causal``); families override."""
        raise ConfigError(f"family {self.name!r} does not accept --shape/--dtype on the command line: pass a problem "
                          f"from Python (tunelab.tune({self.name!r}, problem)) or define problem_from_cli on the family")

    def store_key(self, problem: Any) -> dict:
        """What identifies a tuned config in the store besides family and device: shape bucket, dtype, flags.

        The default rounds every integer dimension up to the next power of two and keeps other values.
        """
        d = self.problem_dict(problem)
        return {k: (next_pow2(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in d.items()}

    def memory_required(self, config: Config, problem: Any) -> int | None:
        """Bytes of device memory the candidate needs beyond its inputs (workspace); None if unknown."""
        return None

    def worker_ref(self) -> Any:
        """What the worker subprocess needs to rebuild this family: the family itself (pickled, the default),
        ``"module:attr"`` (a family object, or a class called without arguments) or ``("module:attr", kwargs)``."""
        return self


def problem_from(cls: type, problem: Any, family: str, aliases: Mapping[str, str] | None = None) -> Any:
    """``problem`` as the family's problem dataclass ``cls``: an instance is returned as is, a dict becomes one
    (keys in ``aliases`` renamed first); an unknown key or another type raises ConfigError naming the accepted keys."""
    if isinstance(problem, cls):
        return problem
    fields = list(cls.__dataclass_fields__)
    alias_note = f" (aliases {list(aliases)})" if aliases else ""
    if isinstance(problem, Mapping):
        d = dict(problem)
        for alias, name in (aliases or {}).items():
            if alias in d and name not in d:
                d[name] = d.pop(alias)
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ConfigError(f"{family} problem has unknown key(s) {unknown}; accepted keys are {fields}{alias_note}")
        return cls(**d)
    raise ConfigError(f"{family} problem {problem!r} must be a {cls.__name__} or a dict with keys from {fields}"
                      f"{alias_note}")


def problem_to_dict(problem: Any) -> dict:
    """A problem as a plain dict: dicts are copied, dataclasses converted, objects with ``to_dict`` asked."""
    if problem is None:
        return {}
    if isinstance(problem, Mapping):
        return {str(k): v for k, v in problem.items()}
    if dataclasses.is_dataclass(problem) and not isinstance(problem, type):
        return dataclasses.asdict(problem)
    if hasattr(problem, "to_dict"):
        return dict(problem.to_dict())
    if hasattr(problem, "_asdict"):
        return dict(problem._asdict())
    raise ConfigError(f"cannot describe problem {problem!r} of type {type(problem).__name__}; "
                      "pass a dict, a dataclass or an object with to_dict()")


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return "x".join(_scalar(x) for x in v)
    return str(v)


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def stable_hash(*parts: Any) -> str:
    """SHA-256 (hex, 16 digits) of the JSON of ``parts``: a short stable identity."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


# -- registry ---------------------------------------------------------------------------------------------------
_REGISTRY: dict[str, Callable[[], TunableFamily]] = {}


def register_family(name: str, factory: Callable[[], TunableFamily]) -> None:
    """Make ``get_family(name)`` return ``factory()`` (for families outside ``tunelab.tuning.families``)."""
    _REGISTRY[name] = factory


def available_families() -> list[str]:
    """Names of families that can be looked up: registered ones plus modules in ``tunelab.tuning.families``."""
    import pkgutil

    import tunelab.tuning.families as pkg

    names = set(_REGISTRY)
    names.update(m.name for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))
    return sorted(names)


def get_family(name: str | TunableFamily) -> TunableFamily:
    """The family called ``name`` (a family object is returned unchanged).

    Looks in the registry, then imports ``tunelab.tuning.families.<name>`` and takes, in order: a
    ``get_family()`` function, a ``FAMILY`` or ``family`` object, or the single :class:`TunableFamily`
    subclass defined there (instantiated without arguments).
    """
    if not isinstance(name, str):
        return name
    if name in _REGISTRY:
        return _REGISTRY[name]()
    try:
        module = importlib.import_module(f"tunelab.tuning.families.{name}")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.endswith(f"families.{name}"):
            raise ConfigError(f"unknown kernel family {name!r}; accepted families are "
                              f"{available_families()}") from None
        raise
    if callable(getattr(module, "get_family", None)):
        return module.get_family()
    for attr in ("FAMILY", "family"):
        obj = getattr(module, attr, None)
        if isinstance(obj, TunableFamily) or (obj is not None and hasattr(obj, "space") and hasattr(obj, "compile")):
            return obj
    classes = [v for v in vars(module).values()
               if isinstance(v, type) and issubclass(v, TunableFamily) and v is not TunableFamily
               and v.__module__ == module.__name__]
    if len(classes) == 1:
        return classes[0]()
    raise ConfigError(f"module tunelab.tuning.families.{name} defines no family: add get_family() or FAMILY")
