"""The real backend: compile with the family on the host, measure on the GPU in the worker process.

Host half (:meth:`FamilyBackend.prepare`, compile thread pool, no GPU needed): ``family.compile`` (NVRTC; the
disk cache makes the worker's second compile of the same config a cache hit) and the compiled gates.

Device half (:meth:`FamilyBackend.measure`, in the worker): numerics gate (``family.check`` against the
reference on random inputs), memory gate, then the core's timer (L2 flush, events, warm-up; kernels whose
median is under 20 µs are re-timed with CUDA-graph replay so launch overhead does not rank them). The SM
clock is read from NVML around each measurement.
"""
from __future__ import annotations

import importlib
import time
from typing import Any

import numpy as np

from tunelab.tuning.backend import Arm, Backend, ConfirmData, Outcome, Prepared
from tunelab.tuning.family import Rejection, TunableFamily
from tunelab.tuning.gates import GateConfig, compiled_rejection
from tunelab.tuning.space import Config

GRAPH_BELOW_US = 20.0


def _sm_clock(device: int) -> float | None:
    try:
        from tunelab.env import sm_clocks

        c = sm_clocks(device)
        return None if not c else float(c.get("sm_mhz"))
    except Exception:  # noqa: BLE001 - NVML is optional
        return None


def resolve_worker_ref(ref: Any) -> TunableFamily:
    """Rebuild a family from ``worker_ref()``: the family itself, ``"module:attr"`` or ``("module:attr", kwargs)``."""
    kwargs: dict = {}
    if isinstance(ref, tuple) and len(ref) == 2 and isinstance(ref[0], str):
        ref, kwargs = ref
    if isinstance(ref, str):
        module, _, attr = ref.partition(":")
        obj = getattr(importlib.import_module(module), attr)
        return obj(**kwargs) if isinstance(obj, type) or callable(obj) and kwargs else obj
    return ref


class FamilyBackend(Backend):
    """Compile, gate and measure the configs of ``family`` for ``problem`` on GPU ``device``.

    ``warmup``/``samples``: timer settings of a search measurement; ``confirm_warmup``: launches of each arm
    before the interleaved rounds. ``arch`` defaults to the device's (``tunelab.current_arch``); families
    that need an arch-specific variant (``sm_90a``) upgrade it themselves.
    """

    mode = "gpu"

    def __init__(self, family: TunableFamily, problem: Any, *, gates: GateConfig | None = None,
                 arch: str | None = None, device: int = 0, warmup: int = 5, samples: int = 30,
                 confirm_warmup: int = 10, input_seed: int = 0, cuda_graph: bool | str = "auto"):
        self.family = family
        self.problem = problem
        self.gates = gates or GateConfig()
        self._arch = arch
        self.device = device
        self.warmup = warmup
        self.samples = samples
        self.confirm_warmup = confirm_warmup
        self.input_seed = input_seed
        self.cuda_graph = cuda_graph
        self._inputs = None
        self._device_info: dict | None = None

    # -- pickling: the worker rebuilds the family from its worker_ref and never gets host caches --------------
    def __getstate__(self):
        state = dict(self.__dict__)
        state["family"] = self.family.worker_ref()
        state["_inputs"] = None
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.family = resolve_worker_ref(self.family)

    # -- host ------------------------------------------------------------------------------------------------------
    @property
    def arch(self) -> str:
        """Target arch for compilation."""
        if self._arch is None:
            from tunelab.kernel import current_arch

            self._arch = current_arch(self.device)  # device given: no torch CUDA init in the parent
        return self._arch

    def device_info(self) -> dict:
        """Name, UUID, arch and SM count from the core, without creating a CUDA context here."""
        if self._device_info is None:
            info: dict = {"index": self.device}
            try:
                from tunelab import _core

                d = _core.device_info(self.device)
                info.update({k: d[k] for k in ("name", "uuid", "arch", "sm_count") if k in d})
            except Exception as exc:  # noqa: BLE001
                info["name"] = "unknown device"
                info["error"] = str(exc)
            self._device_info = info
        return dict(self._device_info)

    def prepare(self, config: Config) -> Prepared:
        """Compile with the family (NVRTC, disk cache) and apply the compiled gates; CompileError -> compile.error."""
        from tunelab.errors import CompileError

        t0 = time.perf_counter()
        try:
            compiled = self.family.compile(config, self.problem, self.arch)
        except CompileError as exc:
            text = str(exc).strip().splitlines()
            return Prepared(Rejection("compile.error", "\n".join(text[:40])), {}, time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        rej = compiled_rejection(compiled, self.gates)
        if rej is None:
            family_gate = getattr(self.family, "compiled_gates", None)
            extra = family_gate(config, compiled) if family_gate is not None else []
            rej = extra[0] if extra else None
        summary = compiled.summary()
        return Prepared(rej, summary, dt)

    def baseline_names(self) -> list[str]:
        """Baselines the family offers for this problem."""
        return list((self.family.baselines(self.problem) or {}).keys())

    # -- device (worker) ---------------------------------------------------------------------------------------
    def setup(self) -> dict:
        """In the worker: select the GPU and make the inputs (and references) once."""
        import torch

        if not torch.cuda.is_available():
            from tunelab.errors import NoDeviceError

            raise NoDeviceError("torch sees no CUDA device in the measurement worker")
        torch.cuda.set_device(self.device)
        self._inputs = self.family.make_inputs(self.problem, self.input_seed)
        torch.cuda.synchronize()
        info = self.device_info()
        info["sm_clock_mhz"] = _sm_clock(self.device)
        return info

    def _time(self, fn, warmup: int, samples: int, graph: bool) -> np.ndarray:
        from tunelab.timing import time_callable

        return np.asarray(time_callable(fn, warmup=warmup, samples=samples, flush_l2=True, cuda_graph=graph))

    def _free_bytes(self) -> int:
        import torch

        return int(torch.cuda.mem_get_info(self.device)[0])

    def measure(self, config: Config) -> Outcome:
        """Compile (cache hit), numerics gate, memory gate, then time; CUDA graphs under 20 µs."""
        t0 = time.perf_counter()
        compiled = self.family.compile(config, self.problem, self.arch)
        report = self.family.check(config, compiled, self._inputs)
        if not report.ok:
            return Outcome.rejected(Rejection(report.code, report.detail), errors=dict(report.errors),
                                    measure_s=time.perf_counter() - t0)
        need = self.family.memory_required(config, self.problem)
        if need:
            free = self._free_bytes()
            if need > 0.9 * free:  # keep headroom for the timer's L2-flush buffer and the allocator
                return Outcome.rejected(Rejection("memory.free", f"needs {need} B, {free} B free"),
                                        measure_s=time.perf_counter() - t0)
        fn = self.family.timing_closure(config, compiled, self._inputs)
        clock_before = _sm_clock(self.device)
        samples = self._time(fn, self.warmup, self.samples, self.cuda_graph is True)
        extra: dict = {"timer": "cuda_graph" if self.cuda_graph is True else "events"}
        if self.cuda_graph == "auto" and float(np.median(samples)) < GRAPH_BELOW_US:
            extra["event_median_us"] = float(np.median(samples))
            samples = self._time(fn, self.warmup, self.samples, True)
            extra["timer"] = "cuda_graph"
        clock_after = _sm_clock(self.device)
        clocks = [c for c in (clock_before, clock_after) if c is not None]
        return Outcome("ok", samples=[float(x) for x in samples],
                       sm_clock_mhz=float(np.mean(clocks)) if clocks else None,
                       measure_s=time.perf_counter() - t0, errors=dict(report.errors), extra=extra)

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """Time every arm ``rounds`` times, interleaved A B C A B C, one sample per arm per round."""
        t0 = time.perf_counter()
        fns, errors = {}, {}
        baselines = self.family.baselines(self.problem) or {}
        for arm in arms:
            try:
                if arm.kind == "baseline":
                    factory = baselines[arm.baseline]
                    fns[arm.label] = factory(self._inputs)
                else:
                    compiled = self.family.compile(arm.config, self.problem, self.arch)
                    fns[arm.label] = self.family.timing_closure(arm.config, compiled, self._inputs)
            except Exception as exc:  # noqa: BLE001 - an arm that cannot run is reported, the rest go on
                errors[arm.label] = f"{type(exc).__name__}: {exc}"
        # One timer mode for every arm: CUDA graphs when any arm is a microsecond kernel.
        graph = self.cuda_graph is True
        if self.cuda_graph == "auto":
            medians = {}
            for label, fn in fns.items():
                medians[label] = float(np.median(self._time(fn, self.confirm_warmup, 5, False)))
            graph = any(m < GRAPH_BELOW_US for m in medians.values())
        if graph:
            for label, fn in list(fns.items()):
                try:
                    self._time(fn, 1, 1, True)
                except Exception as exc:  # noqa: BLE001 - not capturable: time everything without graphs
                    errors[label + " (graph)"] = f"not capturable in a CUDA graph: {exc}"
                    graph = False
                    break
        for fn in fns.values():
            self._time(fn, self.confirm_warmup, 1, graph)
        samples: dict[str, list[float]] = {label: [] for label in fns}
        clocks = []
        for r in range(rounds):
            for label, fn in fns.items():  # A B C A B C ...: drift hits every arm alike
                samples[label].append(float(self._time(fn, 1, 1, graph)[0]))
            if r % 20 == 0:
                c = _sm_clock(self.device)
                if c is not None:
                    clocks.append(c)
        return ConfirmData(samples, errors, clocks, time.perf_counter() - t0)

    def describe(self) -> dict:
        """Timer settings and target, for results files."""
        return {"mode": self.mode, "arch": self._arch, "device": self.device, "warmup": self.warmup,
                "samples": self.samples, "cuda_graph": self.cuda_graph, "input_seed": self.input_seed}
