"""Replay: tune from recorded measurements instead of a GPU.

A replay file records, for one family, problem and device, the outcome of every config of the space: its
gate outcome (with reason code) or its timing samples. ``tunelab tune --replay FILE`` runs the whole pipeline
against it (seeding, sampler, gates, duplicate handling, confirmation, verdict) on a machine without a GPU.
``benchmarks/ground_truth.py`` writes one by measuring every valid config on the GPU; the tuner-efficiency
benchmark replays it many times with different samplers and seeds.

Format (JSON, ``format: "tunelab.replay"``, ``version: 1``)::

    {
      "format": "tunelab.replay", "version": 1,
      "family": "attention",                  # family name
      "problem": {...}, "problem_key": "...", # what was measured
      "source_hash": "...",                   # kernel sources measured
      "device": {"name": "NVIDIA H200", ...}, # where
      "env": {...},                           # tunelab.env.fingerprint() of the recording
      "space": {...},                         # SearchSpace.to_dict()
      "default_config": {...},
      "timing": {"warmup": 5, "samples": 15, "flush_l2": true, "cuda_graph": false},
      "entries": [                            # one per config of the space (the full Cartesian product)
        {"key": "BLOCK_M=128,...", "config": {...},
         "status": "ok" | "rejected" | "failed",
         "code": null | "static.smem" | "compiled.spills" | "numerics.error" | "runtime.trap" | ...,
         "detail": "...", "samples_us": [..], "sm_clock_mhz": 1980.0, "resources": {...}, "compile_s": 0.8},
        ...],
      "baselines": {"sdpa_default": {"samples_us": [...]}, ...}
    }

Semantics in replay: ``static.*`` entries are static rejections, ``compile.*``/``compiled.*`` are returned by the
host half, ``numerics.*``/``memory.*`` and ``runtime.*`` by the measurement; an ``ok`` entry's samples are
returned as measured (so the objective is the recorded median: deterministic, as in Kernel Tuner's
simulation mode). Confirmation draws ``rounds`` samples per arm with replacement from the recorded samples.
A config the file does not list is a static rejection (``static.constraint``: not in the recording).

Replayed results are simulations: they are labelled ``mode: replay`` and never written to the tuned-config store.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from tunelab.errors import TunelabError
from tunelab.jsonfile import read_json, write_json
from tunelab.tuning.backend import Arm, Backend, ConfirmData, Outcome, Prepared
from tunelab.tuning.family import Rejection, TunableFamily
from tunelab.tuning.space import Config, SearchSpace, config_key

FORMAT = "tunelab.replay"
VERSION = 1


class ReplayData:
    """A loaded replay file: entries by config key, baselines, and the recording's metadata."""

    def __init__(self, data: Mapping[str, Any], path: str | None = None):
        if data.get("format") != FORMAT:
            raise TunelabError(f"{path or 'data'} is not a tunelab replay file (format={data.get('format')!r}, "
                               f"expected {FORMAT!r})")
        if data.get("version") != VERSION:
            raise TunelabError(f"replay file {path or ''} has version {data.get('version')!r}; this tunelab reads "
                               f"version {VERSION}. Re-record it with benchmarks/ground_truth.py")
        self.raw = dict(data)
        self.path = path
        self.space = SearchSpace.from_dict(data["space"])
        self.entries: dict[str, dict] = {}
        for e in data["entries"]:
            key = config_key(e["config"])
            self.entries[key] = e
        self.baselines: dict[str, dict] = dict(data.get("baselines", {}))

    @property
    def family(self) -> str:
        """Name of the family recorded."""
        return self.raw["family"]

    @property
    def problem(self) -> dict:
        """The problem recorded."""
        return dict(self.raw.get("problem", {}))

    @property
    def device(self) -> dict:
        """The device the recording was made on."""
        return dict(self.raw.get("device", {}))

    def entry(self, config: Mapping[str, Any]) -> dict | None:
        """The recorded entry of ``config`` or None."""
        return self.entries.get(config_key({k: config[k] for k in self.space.names if k in config}))

    def measured(self) -> dict[str, float]:
        """Config key -> median latency (µs) of every ``ok`` entry."""
        return {k: float(np.median(e["samples_us"])) for k, e in self.entries.items()
                if e["status"] == "ok" and e.get("samples_us")}

    def optimum(self) -> tuple[str, float]:
        """Key and median latency of the fastest recorded config."""
        m = self.measured()
        if not m:
            raise TunelabError("the replay file has no measured configs (every entry was rejected or failed); record one with benchmarks/ground_truth.py on a GPU")
        key = min(m, key=m.get)
        return key, m[key]

    def digest(self) -> str:
        """Short hash of the recorded measurements (identifies the replay in study names)."""
        blob = json.dumps([self.raw.get("family"), self.raw.get("problem_key"), sorted(self.entries)],
                          sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


def load_replay(path: str | os.PathLike) -> ReplayData:
    """Read and validate a replay file (``.json`` or gzip-compressed ``.json.gz``); errors name the file."""
    data = read_json(path, "replay file", missing_hint="record one with benchmarks/ground_truth.py or pass an "
                     "existing path to --replay", invalid_hint="record it again with benchmarks/ground_truth.py")
    return ReplayData(data, str(path))


def save_replay(path: str | os.PathLike, data: Mapping[str, Any]) -> Path:
    """Write a replay dict atomically (temp file + rename) after validating it; ``.gz`` paths are gzipped."""
    ReplayData(data)  # validates
    return write_json(path, data)


def make_replay_dict(*, family: str, problem: Mapping[str, Any], problem_key: str, space: SearchSpace,
                     default_config: Mapping[str, Any], entries: Iterable[Mapping[str, Any]],
                     baselines: Mapping[str, Iterable[float]] | None = None, device: Mapping | None = None,
                     env: Mapping | None = None, source_hash: str = "", timing: Mapping | None = None,
                     notes: str = "") -> dict:
    """Assemble a replay dict (what :func:`save_replay` writes)."""
    return {
        "format": FORMAT, "version": VERSION, "family": family, "problem": dict(problem),
        "problem_key": problem_key, "source_hash": source_hash, "device": dict(device or {}),
        "env": dict(env or {}), "space": space.to_dict(), "default_config": dict(default_config),
        "timing": dict(timing or {}), "notes": notes,
        "entries": [dict(e) for e in entries],
        "baselines": {k: {"samples_us": [float(x) for x in v]} for k, v in (baselines or {}).items()},
    }


def _space_with_live_derived(replay: ReplayData) -> SearchSpace:
    """The recorded space, with the installed family's derived-value functions (e.g. model features for the GP
    sampler, which the file cannot hold) when that family declares exactly the recorded space; its constraints stay
    the recorded ones by name: the recorded static rejections alone decide validity, whatever code is installed."""
    try:
        from tunelab.tuning.family import get_family

        fam = get_family(replay.family)
        live = fam.space(fam.problem_from_dict(replay.problem))
    except Exception:  # noqa: BLE001 - family not installed or not importable here: the recorded space as it is
        return replay.space
    if not isinstance(live, SearchSpace) or live.to_dict() != replay.space.to_dict():
        return replay.space  # the family's space changed since the recording
    return SearchSpace.from_dict(replay.raw["space"], derived=live.derived)


class ReplayFamily(TunableFamily):
    """The family as the replay file describes it: its space, default config and static rejections."""

    def __init__(self, replay: ReplayData):
        self.replay = replay
        self.name = replay.family
        self._space = _space_with_live_derived(replay)

    def space(self, problem: Any) -> SearchSpace:
        """The recorded space, with the installed family's derived-value functions when it declares exactly the
        recorded space (constraints by name only; the recorded static rejections decide validity)."""
        return self._space

    def default_config(self, problem: Any) -> Config:
        """The recorded default config."""
        return dict(self.replay.raw["default_config"])

    def static_gates(self, config: Config, problem: Any) -> list[Rejection]:
        """The recorded static rejection of ``config``; configs not recorded are rejected too."""
        e = self.replay.entry(config)
        if e is None:
            return [Rejection("static.constraint",
                              f"not in the replay recording ({len(self.replay.entries)} configs recorded)")]
        if e["status"] == "rejected" and str(e.get("code", "")).startswith("static."):
            return [Rejection(e["code"], e.get("detail", ""))]
        return []

    def source_hash(self) -> str:
        """The recorded kernel-source hash."""
        return self.replay.raw.get("source_hash", "")

    def problem_key(self, problem: Any) -> str:
        """The recorded problem key."""
        return self.replay.raw.get("problem_key") or super().problem_key(problem)

    def baselines(self, problem: Any) -> dict:
        """Names of the recorded baselines (no callables: replay measures nothing)."""
        return {name: None for name in self.replay.baselines}


class ReplayBackend(Backend):
    """Answers the host and device halves from a :class:`ReplayData`."""

    mode = "replay"

    def __init__(self, replay: ReplayData):
        self.replay = replay

    def device_info(self) -> dict:
        """The device the recording was made on."""
        return dict(self.replay.device)

    def setup(self) -> dict:
        """Nothing to set up; the recorded device."""
        return dict(self.replay.device)

    def prepare(self, config: Config) -> Prepared:
        """The recorded compile/compiled-gate outcome and resources."""
        e = self.replay.entry(config)
        if e is None:
            return Prepared(Rejection("static.constraint", "not in the replay recording"))
        code = str(e.get("code") or "")
        resources = dict(e.get("resources") or {})
        if e["status"] == "rejected" and code.split(".")[0] in ("compile", "compiled", "static"):
            return Prepared(Rejection(code, e.get("detail", "")), resources, float(e.get("compile_s", 0.0)))
        return Prepared(None, resources, float(e.get("compile_s", 0.0)))

    def measure(self, config: Config) -> Outcome:
        """The recorded samples, numerics/memory rejection or runtime failure."""
        e = self.replay.entry(config)
        if e is None:
            return Outcome.failed("runtime.error", "config not recorded in the replay file")
        status, code = e["status"], e.get("code")
        if status == "ok":
            return Outcome("ok", samples=[float(x) for x in e["samples_us"]], sm_clock_mhz=e.get("sm_clock_mhz"),
                           errors=dict(e.get("errors") or {}))
        if status == "rejected":
            return Outcome.rejected(Rejection(code or "numerics.error", e.get("detail", "")))
        return Outcome.failed(code or "runtime.error", e.get("detail", ""))

    def confirm(self, arms: list[Arm], rounds: int, seed: int = 0) -> ConfirmData:
        """``rounds`` draws with replacement from each arm's recorded samples."""
        rng = np.random.default_rng(seed)
        out, errors = {}, {}
        for arm in arms:
            if arm.kind == "baseline":
                rec = self.replay.baselines.get(arm.baseline)
                samples = rec.get("samples_us") if rec else None
            else:
                e = self.replay.entry(arm.config)
                samples = e.get("samples_us") if e and e["status"] == "ok" else None
            if not samples:
                errors[arm.label] = "no recorded samples"
                continue
            out[arm.label] = [float(x) for x in rng.choice(np.asarray(samples, float), size=rounds, replace=True)]
        return ConfirmData(out, errors, [])

    def baseline_names(self) -> list[str]:
        """Baselines the recording has samples for."""
        return list(self.replay.baselines)

    def describe(self) -> dict:
        """File, digest and recording device, for results files."""
        return {"mode": self.mode, "file": self.replay.path, "digest": self.replay.digest(),
                "recorded_on": self.replay.device.get("name")}


def synthesize_replay(family: TunableFamily, problem: Any, latency: Callable[[Mapping[str, Any]], float], *,
                      outcome_code: Callable[[Mapping[str, Any]], str | None] | None = None,
                      baselines: Mapping[str, float] | None = None, n_samples: int = 15, noise: float = 0.02,
                      seed: int = 0, device_name: str = "Synthetic GPU", notes: str = "synthetic") -> dict:
    """A synthetic replay dict: every config of the family's space, static gates applied, latencies from
    ``latency`` with log-normal noise. For development and CPU tests only (``device.synthetic = True``)."""
    from tunelab.tuning.gates import static_rejection

    rng = np.random.default_rng(seed)
    space = family.space(problem)
    entries = []
    for config in space.enumerate(valid_only=False):
        rej = static_rejection(family, space, config, problem)
        if rej is not None:
            entries.append({"config": config, "key": space.key(config), "status": "rejected", "code": rej.code,
                            "detail": rej.detail})
            continue
        code = outcome_code(config) if outcome_code else None
        if code:
            status = "failed" if code.startswith("runtime.") else "rejected"
            entries.append({"config": config, "key": space.key(config), "status": status, "code": code,
                            "detail": "synthetic"})
            continue
        mean = latency(space.complete(config))
        samples = (mean * np.exp(rng.normal(0, noise, n_samples))).round(3).tolist()
        entries.append({"config": config, "key": space.key(config), "status": "ok", "code": None,
                        "samples_us": samples, "sm_clock_mhz": 1980.0})
    base = {name: (mean * np.exp(rng.normal(0, noise, 100))).round(3).tolist()
            for name, mean in (baselines or {}).items()}
    return make_replay_dict(family=family.name, problem=family.problem_dict(problem),
                            problem_key=family.problem_key(problem), space=space,
                            default_config=family.default_config(problem), entries=entries, baselines=base,
                            device={"name": device_name, "synthetic": True}, source_hash=family.source_hash(),
                            timing={"samples": n_samples, "synthetic_noise": noise}, notes=notes)
