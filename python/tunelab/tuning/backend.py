"""What the study driver asks of an evaluation backend, and the records it gets back.

A :class:`Backend` has a host half and a device half:

* :meth:`Backend.prepare` runs on the host, in the compile thread pool: compile and apply the compiled gates.
* :meth:`Backend.measure` and :meth:`Backend.confirm` run where the GPU is: in a worker subprocess (see
  :mod:`tunelab.tuning.worker`) for fault isolation, or in-process for replay and tests.

Three backends plug in: :class:`~tunelab.tuning.family_backend.FamilyBackend` (real kernels on a GPU),
:class:`~tunelab.tuning.replay.ReplayBackend` (recorded measurements) and
:class:`~tunelab.tuning.fake.FakeBackend` (a Python objective that can crash or hang on demand, for tests).
A backend must be picklable to run in a worker subprocess.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tunelab.tuning.family import Rejection
from tunelab.tuning.space import Config


@dataclass
class Prepared:
    """Result of the host half: ``rejection`` is None when the config may be measured.

    ``resources`` is the compiled candidate's JSON summary (registers, spills, smem, occupancy), ``compile_s``
    the wall time compiling took (0 on a cache hit or in replay).
    """

    rejection: Rejection | None = None
    resources: dict = field(default_factory=dict)
    compile_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True when the compiled gates passed."""
        return self.rejection is None


@dataclass
class Outcome:
    """Result of measuring one config.

    ``status``: ``"ok"`` (measured; ``samples`` in µs), ``"rejected"`` (a numerics or memory gate said no) or
    ``"failed"`` (trap, crash, timeout, error: the config is remembered as infeasible). ``sm_clock_mhz`` is
    the SM clock NVML reported around the measurement (None without NVML). ``measure_s`` is wall time in the
    worker, ``errors`` the numerics gate's measured errors.
    """

    status: str
    code: str | None = None
    detail: str = ""
    samples: list[float] = field(default_factory=list)
    sm_clock_mhz: float | None = None
    measure_s: float = 0.0
    errors: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    @classmethod
    def rejected(cls, rejection: Rejection, **kw) -> "Outcome":
        """A gate rejection as an outcome."""
        return cls("rejected", rejection.code, rejection.detail, **kw)

    @classmethod
    def failed(cls, code: str, detail: str, **kw) -> "Outcome":
        """A runtime failure as an outcome."""
        return cls("failed", code, detail, **kw)

    @property
    def value(self) -> float | None:
        """The objective: median of the samples in µs (None unless measured)."""
        if self.status != "ok" or not self.samples:
            return None
        import numpy as np

        return float(np.median(self.samples))

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class Arm:
    """One arm of a confirmation: a config of the family, or a named baseline."""

    label: str
    kind: str  # "config" or "baseline"
    config: Config | None = None
    baseline: str | None = None

    def to_dict(self) -> dict:
        """JSON-ready form."""
        return asdict(self)


@dataclass
class ConfirmData:
    """Samples per arm label from an interleaved confirmation; ``errors`` lists arms that could not run."""

    samples: dict[str, list[float]]
    errors: dict[str, str] = field(default_factory=dict)
    sm_clock_mhz: list[float] = field(default_factory=list)
    measure_s: float = 0.0


class Backend:
    """Interface of evaluation backends (see the module docstring)."""

    #: "gpu" for real measurements, "replay" or "fake" otherwise; recorded in results.
    mode: str = "gpu"

    def prepare(self, config: Config) -> Prepared:
        """Host half: compile ``config`` and apply the compiled gates (thread-safe)."""
        return Prepared()

    def setup(self) -> dict:
        """Called once where measurements run (in the worker): initialise the device, make inputs.

        Returns facts about the device (name, uuid, clocks) for the results file.
        """
        return {}

    def measure(self, config: Config) -> Outcome:
        """Device half: numerics gate, memory gate, then timing; see :class:`Outcome`."""
        raise NotImplementedError

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """Measure every arm ``rounds`` times, interleaved (A B C A B C ...)."""
        raise NotImplementedError

    def device_info(self) -> dict:
        """Device facts known on the host side (name at least) without initialising CUDA here."""
        return {}

    def describe(self) -> dict:
        """JSON-ready description of the backend for results files."""
        return {"mode": self.mode}
