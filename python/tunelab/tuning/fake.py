"""A toy kernel family and a fake backend, for testing the tuner without a GPU.

:class:`ToyFamily` declares a realistic tile-tuning space (tile sizes, warps, pipeline stages, swizzle,
layout) with constraints, static and compiled rejections, and :func:`toy_latency` gives every config a
deterministic latency with a known optimum (``TOY_OPTIMUM``) and per-config irregularity, so samplers cannot
win by assuming a separable or smooth landscape.

:class:`FakeBackend` measures with that model plus noise, and can, on demand, crash its process, hang,
"trap" (raise a poisoned-context error) or raise, for chosen config keys: the worker's fault handling is
tested with it. Everything here is module-level and picklable, so it runs inside the spawned worker.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
from typing import Any, Callable, Mapping

import numpy as np

from tunelab.tuning.backend import Arm, Backend, ConfirmData, Outcome, Prepared
from tunelab.tuning.family import Rejection, TunableFamily
from tunelab.tuning.space import Config, Constraint, Derived, Param, SearchSpace, config_key

TOY_OPTIMUM: dict = {"BLOCK_M": 128, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 3, "SWIZZLE": True,
                     "LAYOUT": "row"}
TOY_DEFAULT: dict = {"BLOCK_M": 64, "BLOCK_N": 64, "NUM_WARPS": 4, "NUM_STAGES": 2, "SWIZZLE": False,
                     "LAYOUT": "row"}
SMEM_LIMIT = 100 * 1024


def toy_space(name: str = "toy/gemm") -> SearchSpace:
    """1280-point space with a divisibility constraint and a derived thread count."""
    return SearchSpace(
        name,
        params=[Param("BLOCK_M", [16, 32, 64, 128, 256]), Param("BLOCK_N", [16, 32, 64, 128]),
                Param("NUM_WARPS", [1, 2, 4, 8]), Param("NUM_STAGES", [1, 2, 3, 4]),
                Param("SWIZZLE", [False, True]), Param("LAYOUT", ["row", "col"])],
        constraints=[Constraint("warps_divide_block_m", lambda c: c["BLOCK_M"] % (16 * c["NUM_WARPS"]) == 0,
                                "BLOCK_M must be a multiple of 16*NUM_WARPS", code="static.divisibility")],
        derived=[Derived("THREADS", lambda c: 32 * c["NUM_WARPS"], "threads per block")],
    )


def toy_smem_bytes(config: Mapping[str, Any]) -> int:
    """Shared memory of the toy kernel: (BLOCK_M + BLOCK_N) rows of 64 fp16 per pipeline stage."""
    return (config["BLOCK_M"] + config["BLOCK_N"]) * 64 * 2 * config["NUM_STAGES"]


def toy_registers(config: Mapping[str, Any]) -> int:
    """Registers per thread of the toy kernel: a fp32 accumulator tile spread over the block's threads."""
    return 32 + config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["NUM_WARPS"])


def _jitter(key: str, amplitude: float) -> float:
    h = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return 1.0 + amplitude * (2 * h - 1)


def toy_latency(config: Mapping[str, Any]) -> float:
    """Deterministic latency (µs) of a toy config; minimal at :data:`TOY_OPTIMUM` (30.0 µs)."""
    bm, bn, nw, st = config["BLOCK_M"], config["BLOCK_N"], config["NUM_WARPS"], config["NUM_STAGES"]
    t = 30.0
    t *= 1 + 0.35 * abs(math.log2(bm / 128)) ** 1.3
    t *= 1 + 0.25 * abs(math.log2(bn / 64)) ** 1.2
    t *= 1 + 0.10 * abs(math.log2(nw / 4))
    t *= 1 + 0.025 * abs(st - 3)
    # interactions: big tiles want more warps; swizzle matters more with more stages; col layout hurts wide N.
    t *= 1 + 0.05 * abs(math.log2(bm * bn / 8192) - math.log2(nw / 4))
    t *= 1.0 if config["SWIZZLE"] else 1 + 0.012 * st
    t *= 1.0 if config["LAYOUT"] == "row" else 1 + 0.06 + 0.0004 * bn
    if config == TOY_OPTIMUM or all(config.get(k) == v for k, v in TOY_OPTIMUM.items()):
        return 30.0
    # Deterministic irregularity, never below the optimum's value.
    return max(30.2, t * _jitter(config_key({k: config[k] for k in TOY_OPTIMUM}), 0.02))


class ToyFamily(TunableFamily):
    """A family over :func:`toy_space` for tests; only its host-side methods are real."""

    name = "toy"

    def space(self, problem: Any) -> SearchSpace:
        """The toy space."""
        return toy_space()

    def default_config(self, problem: Any) -> Config:
        """The toy default config."""
        return dict(TOY_DEFAULT)

    def static_gates(self, config: Config, problem: Any) -> list[Rejection]:
        """Shared memory above 100 KB is rejected (static.smem)."""
        smem = toy_smem_bytes(config)
        if smem > SMEM_LIMIT:
            return [Rejection("static.smem", f"{smem} bytes of shared memory > {SMEM_LIMIT}")]
        return []

    def source_hash(self) -> str:
        """A fixed hash."""
        return "toy-source-v1"

    def problem_from_cli(self, shape, dtype, flags):
        """``--shape M,N``."""
        return {"M": shape[0], "N": shape[1] if len(shape) > 1 else shape[0], "dtype": dtype}


def toy_outcome_code(config: Mapping[str, Any]) -> str | None:
    """Gate outcome of the toy kernel beyond static gates: compiled spills, or a numerics bug; None if fine."""
    if toy_registers(config) > 255:
        return "compiled.spills"
    if config["LAYOUT"] == "col" and not config["SWIZZLE"] and config["BLOCK_N"] == 16:
        return "numerics.error"  # a deliberate "bug" in one corner of the space
    return None


class FakeBackend(Backend):
    """Backend measuring a Python latency model with log-normal noise; faults on demand for chosen keys.

    ``crash``/``hang``/``trap``/``error``: collections of config keys (see ``space.key``). In a worker
    process a crash is ``os._exit(139)`` and a hang sleeps for ``hang_seconds``; in the parent process they
    raise instead, so a test can never take down the test runner. ``outcome_code(config)`` returns a reason
    code for configs the gates should reject (``compiled.*`` ones are reported by :meth:`prepare`).
    """

    mode = "fake"

    def __init__(self, latency: Callable[[Mapping[str, Any]], float] = toy_latency,
                 outcome_code: Callable[[Mapping[str, Any]], str | None] | None = toy_outcome_code,
                 baselines: Mapping[str, float] | None = None, *, crash=(), hang=(), trap=(), error=(),
                 noise: float = 0.02, n_samples: int = 20, seed: int = 0, hang_seconds: float = 3600.0,
                 compile_seconds: float = 0.0, device_name: str = "Fake GPU"):
        self.latency = latency
        self.outcome_code = outcome_code
        self.baselines = dict(baselines if baselines is not None else {"reference_lib": 36.0})
        self.crash, self.hang, self.trap, self.error = set(crash), set(hang), set(trap), set(error)
        self.noise = noise
        self.n_samples = n_samples
        self.seed = seed
        self.hang_seconds = hang_seconds
        self.compile_seconds = compile_seconds
        self.device_name = device_name
        self._owner_pid = os.getpid()
        self.measured: list[str] = []  # keys measured in this process (tests inspect it in-process)
        self.prepared: list[str] = []  # keys compiled (host half) in this process

    def _rng(self, key: str, salt: str = "") -> np.random.Generator:
        h = int(hashlib.sha256(f"{self.seed}|{key}|{salt}".encode()).hexdigest()[:16], 16)
        return np.random.default_rng(h)

    def _samples(self, mean: float, rng: np.random.Generator, n: int) -> list[float]:
        return [float(x) for x in mean * np.exp(rng.normal(0.0, self.noise, n))]

    def device_info(self) -> dict:
        """The fake device's name."""
        return {"name": self.device_name}

    def setup(self) -> dict:
        """Nothing to set up."""
        return {"name": self.device_name, "sm_clock_mhz": 1980.0}

    def prepare(self, config: Config) -> Prepared:
        """Compiled-gate outcome from ``outcome_code``; optional simulated compile time."""
        self.prepared.append(config_key(config))
        if self.compile_seconds:
            time.sleep(self.compile_seconds)
        code = self.outcome_code(config) if self.outcome_code else None
        resources = {"registers": min(255, toy_registers(config)) if "BLOCK_M" in config else 32}
        if code and code.split(".")[0] in ("compile", "compiled"):
            return Prepared(Rejection(code, "fake compiled gate"), resources, self.compile_seconds)
        return Prepared(None, resources, self.compile_seconds)

    def _fault(self, key: str) -> None:
        in_worker = os.getpid() != self._owner_pid
        if key in self.crash:
            if in_worker:
                os._exit(139)
            raise RuntimeError("simulated crash (in-process, so raised instead of exiting)")
        if key in self.hang:
            if in_worker:
                time.sleep(self.hang_seconds)
            raise RuntimeError("simulated hang (in-process, so raised instead of sleeping)")
        if key in self.trap:
            from tunelab.errors import PoisonedContextError

            raise PoisonedContextError("simulated trap: an illegal memory access was encountered",
                                       call="cuStreamSynchronize", code=700)
        if key in self.error:
            raise RuntimeError("simulated launch error")

    def measure(self, config: Config) -> Outcome:
        """Faults on demand, gate outcomes, or noisy samples of the latency model."""
        key = config_key(config)
        self._fault(key)
        code = self.outcome_code(config) if self.outcome_code else None
        if code:
            return Outcome.rejected(Rejection(code, "fake gate"))
        self.measured.append(key)
        samples = self._samples(self.latency(config), self._rng(key), self.n_samples)
        return Outcome("ok", samples=samples, sm_clock_mhz=1980.0, measure_s=0.0)

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """Noisy samples of the latency model (or fake baselines) per arm."""
        out, errors = {}, {}
        for arm in arms:
            if arm.kind == "baseline":
                if arm.baseline not in self.baselines:
                    errors[arm.label] = f"unknown baseline {arm.baseline!r}"
                    continue
                mean = self.baselines[arm.baseline]
                key = "baseline:" + arm.baseline
            else:
                key = config_key(arm.config)
                self._fault(key)
                mean = self.latency(arm.config)
            out[arm.label] = self._samples(mean, self._rng(key, f"confirm{seed}"), rounds)
        return ConfirmData(out, errors, [1980.0])

    def baseline_names(self) -> list[str]:
        """Names of the fake baselines (confirmed against)."""
        return list(self.baselines)

    def describe(self) -> dict:
        """Noise and seed, for results files."""
        return {"mode": self.mode, "noise": self.noise, "n_samples": self.n_samples, "seed": self.seed}
