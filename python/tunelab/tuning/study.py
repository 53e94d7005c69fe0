"""Optuna storage, study names, resuming after a kill, and the study's memory of what it has seen.

Storage: a SQLite file under the cache dir by default (``<cache_dir>/studies/studies.db``); ``storage=`` takes
any Optuna RDB URL (``sqlite:///...``, ``postgresql://...``), ``journal:PATH`` for Optuna's journal file
storage, or ``memory`` for a throw-away in-memory study. Every tell is committed at once, so a study killed
with SIGKILL keeps every trial it completed; the trials it was running are marked failed (``status:
interrupted``) when it is resumed, and their configs may be proposed again.

Study names derive from what makes measurements comparable: family, problem (shape, dtype, flags), device,
kernel-source hash and search-space hash (Optuna's index encoding would silently change meaning if the space
changed under an existing study). Replayed and fake studies are prefixed so they never mix with real ones.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tunelab.errors import ConfigError
from tunelab.tuning.family import stable_hash
from tunelab.tuning.space import SearchSpace

#: Name of the one user attribute holding the tuner's record of a trial (one storage write per trial; SQLite
#: commits dominate the tuner's own overhead).
ATTR = "tunelab"


def info(t: FrozenTrial) -> dict:
    """The tuner's record of a trial: config, key, status, reason, evaluated, duplicate_of, record, source."""
    d = dict(t.user_attrs.get(ATTR) or {})
    d.setdefault("source", t.user_attrs.get("source", "sampler"))
    return d


def default_storage_url() -> str:
    """``sqlite:///<cache_dir>/studies/studies.db``."""
    from tunelab.paths import cache_dir

    folder = cache_dir() / "studies"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'studies.db'}"


def open_storage(url: str | None):
    """An Optuna storage for ``url`` (None: the default SQLite file; "memory": in-memory)."""
    if url is None:
        url = default_storage_url()
    if url in ("memory", ":memory:"):
        return optuna.storages.InMemoryStorage()
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url[len("journal:"):]))
    if "://" not in url:
        raise ConfigError(f"storage {url!r} is not a storage URL; accepted: an Optuna RDB URL such as "
                          "sqlite:///path/studies.db or postgresql://user@host/db, journal:PATH, or memory")
    kwargs = {}
    if url.startswith("sqlite"):
        # Several processes (a resumed study, `tunelab show`) may open the file; wait for locks, don't fail.
        kwargs = {"connect_args": {"timeout": 60}}
    return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)


def redact(url: str | None) -> str | None:
    """The storage URL without a password, for results files."""
    if url is None:
        return None
    return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", url)


def device_slug(name: str) -> str:
    """``NVIDIA H200`` -> ``nvidia-h200`` (for names and file names)."""
    return re.sub(r"[^a-z0-9]+", "-", (name or "unknown").lower()).strip("-") or "unknown"


def make_study_name(family: str, problem_key: str, device: str, source_hash: str, space: SearchSpace,
                    mode: str = "gpu", extra: str = "") -> str:
    """``family|problem|device|src=<hash>|space=<hash>`` with a ``replay:``/``fake:`` prefix when not real."""
    parts = [family, problem_key, device_slug(device), f"src={(source_hash or 'none')[:12]}",
             f"space={stable_hash(space.to_dict())[:8]}"]
    if extra:
        parts.append(extra)
    name = "|".join(parts)
    return name if mode == "gpu" else f"{mode}:{name}"


def fail_interrupted(study: optuna.Study, status: str = "interrupted") -> int:
    """Mark trials left RUNNING by a killed process as FAIL (``status: interrupted``); returns how many.

    One driver per study is assumed: a study is resumed by the process that owns it.
    A trial killed between recording its outcome and telling Optuna carries ``evaluated``; it is dropped, as the
    outcome never reached the study: the budget does not count it and the config may be measured again.
    """
    storage = study._storage
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs = {k: v for k, v in (t.user_attrs.get(ATTR) or {}).items() if k != "evaluated"}
        storage.set_trial_user_attr(t._trial_id, ATTR, dict(attrs, status=status, reason=status))
        storage.set_trial_state_values(t._trial_id, TrialState.FAIL)
        n += 1
    return n


@dataclass
class Known:
    """What the study knows about one config: measured (``value``) or rejected/failed (``code``)."""

    status: str  # "ok" | "rejected" | "failed"
    trial: int
    value: float | None = None
    code: str | None = None
    detail: str = ""


class Memory:
    """Config key -> :class:`Known`, rebuilt from the study's trials (so it survives a restart)."""

    def __init__(self):
        self.by_key: dict[str, Known] = {}

    @classmethod
    def from_study(cls, study: optuna.Study) -> "Memory":
        """Everything finished trials say, ignoring duplicates and cancelled/interrupted trials."""
        m = cls()
        for t in study.get_trials(deepcopy=False):
            m.add_trial(t)
        return m

    def add_trial(self, t: FrozenTrial) -> None:
        """Learn from one finished trial (no-op for other states and for duplicates)."""
        ua = info(t)
        status, key = ua.get("status"), ua.get("key")
        if key is None or status not in ("ok", "rejected", "failed") or key in self.by_key:
            return
        if t.state == TrialState.COMPLETE and status == "ok":
            self.by_key[key] = Known("ok", t.number, value=t.value)
        elif t.state in (TrialState.PRUNED, TrialState.FAIL):
            self.by_key[key] = Known(status, t.number, code=ua.get("reason"),
                                     detail=(ua.get("record") or {}).get("detail", ""))

    def get(self, key: str) -> Known | None:
        """What is known about ``key``."""
        return self.by_key.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.by_key

    def __len__(self) -> int:
        return len(self.by_key)

    def best(self) -> Known | None:
        """The fastest measured config."""
        ok = [k for k in self.by_key.values() if k.status == "ok"]
        return min(ok, key=lambda k: k.value) if ok else None


def trial_record(t: FrozenTrial) -> dict:
    """One trial as a JSON-ready record (what results files list)."""
    ua = info(t)
    rec = dict(ua.get("record") or {})
    return {
        "number": t.number,
        "state": t.state.name,
        "status": ua.get("status", "interrupted" if t.state == TrialState.RUNNING else t.state.name.lower()),
        "value": t.value if t.state == TrialState.COMPLETE else None,
        "config": ua.get("config"),
        "key": ua.get("key"),
        "reason": ua.get("reason"),
        "source": ua.get("source", "sampler"),
        "evaluated": bool(ua.get("evaluated", False)),
        "duplicate_of": ua.get("duplicate_of"),
        "started": t.datetime_start.isoformat() if t.datetime_start else None,
        "completed": t.datetime_complete.isoformat() if t.datetime_complete else None,
        **rec,
    }


def jsonable(value: Any) -> Any:
    """Round-trip ``value`` through JSON (Optuna user attrs must be JSON-serializable)."""
    return json.loads(json.dumps(value, default=float))
