"""The results of a tuning run: a versioned JSON schema and the :class:`TuneResult` object around it.

Schema ``tunelab.results`` version 1 (top-level keys):

``schema``, ``version``, ``created`` (UTC ISO time), ``mode`` (``gpu``, ``replay`` or ``fake``), ``backend``,
``env`` (environment fingerprint), ``device``, ``family``, ``problem``, ``problem_key``, ``source_hash``,
``study`` (name, storage URL without password, sampler, seed, resumed trial count), ``options`` (budgets and
gate thresholds), ``space`` (the search space), ``stop_reason``, ``trials`` (every trial: number, state,
status, value = median µs, config, reason code, detail, samples summary and samples, SM clock, resources,
compile and measure seconds, source, duplicate_of), ``gates`` (rejection counts by reason), ``best_search``
(best config of the search), ``confirmation`` (arms with samples and CIs, speedups), ``verdict``,
``timing`` (wall-clock split: compile, measure, confirm, sampler, overhead) and ``store`` (what was written to
the tuned-config store).
"""
from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path
from typing import Sequence

from tunelab.errors import TunelabError
from tunelab.jsonfile import read_json, write_json
from tunelab.stats import CI
from tunelab.tuning.confirm import Confirmation

SCHEMA = "tunelab.results"
VERSION = 1


def utcnow() -> str:
    """Current UTC time, ISO format with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class TuneResult:
    """What :func:`tunelab.tune` returns: the best config, the verdict with CIs, every trial, plots.

    ``best_config``: confirmed best config (or the search's best when confirmation did not run);
    ``speedup`` and ``ci``: speedup over the best baseline and its 95% CI (``(low, high)``);
    ``verdict``: ``"win"``, ``"no win"`` or ``"not confirmed"``; ``trials_dataframe()``: one row per trial.
    """

    def __init__(self, data: dict):
        self.data = data
        conf = data.get("confirmation")
        self.confirmation: Confirmation | None = Confirmation.from_dict(conf) if conf else None

    # -- headline numbers -------------------------------------------------------------------------------------
    @property
    def best_config(self) -> dict | None:
        """Best confirmed config (the search's best if there was no confirmation)."""
        if self.confirmation is not None and self.confirmation.best_config is not None:
            return dict(self.confirmation.best_config)
        best = self.data.get("best_search")
        return dict(best["config"]) if best else None

    @property
    def best_latency_us(self) -> float | None:
        """Confirmed median latency of the best config (µs), else the search's."""
        if self.confirmation is not None and self.confirmation.best is not None:
            return self.confirmation.arm(self.confirmation.best).summary["median"]
        best = self.data.get("best_search")
        return best["value"] if best else None

    @property
    def speedup(self) -> float | None:
        """Speedup of the best config over the best baseline (point estimate)."""
        s = self.confirmation.speedup_vs_baseline if self.confirmation else None
        return None if s is None else s.estimate

    @property
    def ci(self) -> CI | None:
        """95% CI of :attr:`speedup` (a :class:`~tunelab.stats.CI`; unpacks as ``low, high``)."""
        return self.confirmation.speedup_vs_baseline if self.confirmation else None

    @property
    def speedup_vs_default(self) -> CI | None:
        """Speedup of the best config over the family's default config: what tuning bought."""
        return self.confirmation.speedup_vs_default if self.confirmation else None

    @property
    def verdict(self) -> str:
        """``"win"``, ``"no win"`` or ``"not confirmed"``."""
        v = self.data.get("verdict")
        return v["label"] if v else "not confirmed"

    @property
    def verdict_text(self) -> str:
        """The verdict with its numbers, in words."""
        v = self.data.get("verdict")
        return v["text"] if v else f"not confirmed (stop reason: {self.data.get('stop_reason')})"

    @property
    def trials(self) -> list[dict]:
        """Every trial record."""
        return list(self.data.get("trials", []))

    @property
    def gates(self) -> dict:
        """Rejection counts by reason code."""
        return dict(self.data.get("gates", {}))

    @property
    def timing(self) -> dict:
        """Wall-clock split in seconds."""
        return dict(self.data.get("timing", {}))

    @property
    def study_name(self) -> str:
        """Optuna study name (resume by tuning again with the same arguments and storage)."""
        return self.data.get("study", {}).get("name", "")

    # -- tables and plots -------------------------------------------------------------------------------------
    def trials_dataframe(self):
        """pandas DataFrame with one row per trial: number, status, value_us, reason, source, duplicate_of,
        evaluated, and one column per parameter."""
        import pandas as pd

        params = [p["name"] for p in self.data.get("space", {}).get("params", [])]
        rows = []
        for t in self.trials:
            row = {"number": t["number"], "status": t["status"], "value_us": t.get("value"),
                   "reason": t.get("reason"), "source": t.get("source"), "duplicate_of": t.get("duplicate_of"),
                   "evaluated": t.get("evaluated")}
            for p in params:
                row[p] = (t.get("config") or {}).get(p)
            s = t.get("samples_summary") or {}
            row["samples"] = s.get("n")
            row["sm_clock_mhz"] = t.get("sm_clock_mhz")
            rows.append(row)
        return pd.DataFrame(rows)

    def plot_history(self, ax=None):
        """Optimization history: every measured trial and the best so far (see :func:`tunelab.report.plot_history`)."""
        from tunelab.report import plot_history

        return plot_history(self, ax=ax)

    def plot_confirmation(self, ax=None):
        """Confirmed medians with 95% CIs for every arm (see :func:`tunelab.report.plot_confirmation`)."""
        from tunelab.report import plot_confirmation

        return plot_confirmation(self, ax=ax)

    def profile(self, which: Sequence[str] | None = None, **kwargs):
        """Profile the winner, the default config and the strongest baseline with Nsight Compute, on this GPU and
        this problem: why the winner is faster, in hardware counters. See :func:`tunelab.profile.profile_tuned`
        (``which``, ``warmup``, ``device``, ``timeout``, ``report``, ...); returns its
        :class:`~tunelab.profile.TunedProfile` (``print(p.table())``)."""
        from tunelab.profile import TUNED_ARMS, profile_tuned

        return profile_tuned(self, TUNED_ARMS if which is None else which, **kwargs)

    def summary(self) -> str:
        """A few lines: problem, best config, latency, verdict, budget used."""
        d = self.data
        lines = [f"{d.get('family')} {d.get('problem_key')} on {d.get('device', {}).get('name', '?')} "
                 f"({d.get('mode')})"]
        lines.append(f"best config: {self.best_config}")
        if self.best_latency_us is not None:
            lines.append(f"best latency: {self.best_latency_us:.2f} us")
        lines.append(self.verdict_text)
        if self.speedup_vs_default is not None:
            s = self.speedup_vs_default
            lines.append(f"over the default config: {s.estimate:.3f}x [{s.low:.3f}, {s.high:.3f}]")
        g = self.gates
        lines.append(f"trials: {len(self.trials)} ({g.get('passed', 0)} measured, {g.get('rejected', 0)} rejected); "
                     f"stop: {d.get('stop_reason')}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"TuneResult(verdict={self.verdict!r}, speedup={self.speedup}, best_config={self.best_config})"

    def _repr_html_(self) -> str:
        import html

        return "<pre>" + html.escape(self.summary()) + "</pre>"

    # -- persistence ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """The results document (schema ``tunelab.results`` v1)."""
        return self.data

    def save(self, path: str | os.PathLike) -> Path:
        """Write the results JSON (atomically)."""
        return save_results(path, self.data)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "TuneResult":
        """Read a results JSON written by :meth:`save`."""
        return cls(load_results(path))


def validate(data: dict, where: str = "results") -> dict:
    """Check the schema name, version and required keys; raise TunelabError naming what is wrong."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else None
        raise TunelabError(f"{where} is not a tunelab results file (schema={found!r}, expected {SCHEMA!r})")
    if data.get("version") != VERSION:
        raise TunelabError(f"{where} has results schema version {data.get('version')!r}; this tunelab reads "
                           f"version {VERSION}")
    missing = [k for k in ("family", "problem", "space", "trials", "gates", "timing", "env") if k not in data]
    if missing:
        raise TunelabError(f"{where} lacks required key(s) {missing}")
    return data


def save_results(path: str | os.PathLike, data: dict) -> Path:
    """Validate and write ``data`` as JSON via a temp file and rename."""
    validate(data)
    return write_json(path, data, default=_json_default)


def load_results(path: str | os.PathLike) -> dict:
    """Read and validate a results JSON."""
    data = read_json(path, "results file", missing_hint="`tunelab tune` writes one (its path is printed last)",
                     invalid_hint="it was not written by `tunelab tune`, or was cut short")
    return validate(data, where=str(path))


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)
