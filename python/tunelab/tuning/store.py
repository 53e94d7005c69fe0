"""The tuned-config store: the best confirmed config per (family, device, shape bucket, dtype, flags).

``tunelab.tune`` writes here after a confirmed real run; ``tunelab.ops.*`` read it at dispatch time through
:func:`lookup`. One portable JSON file per device under ``<cache_dir>/store/`` (``nvidia-h200.json``); copy
configs between machines with ``tunelab export FILE`` / ``tunelab import FILE``.

Buckets: a config tuned for one shape serves every shape of its bucket, so nobody re-tunes per exact shape.
For attention the bucket is the **next power of two of the sequence length** (S = 300 and S = 512 share the
512 bucket), with head dim, dtype and causal flag exact; batch and heads are not part of the key (they scale
the grid, not the tile shape that suits a sequence length). Other families bucket every integer dimension to
its next power of two unless they override ``TunableFamily.store_key``.

Staleness: every entry records the kernel-source hash it was tuned with. When the family's sources change,
:func:`lookup` warns (:class:`StaleConfigWarning`), reports status ``stale`` and returns None, so a config is
never silently applied to code it was not measured on.
"""
from __future__ import annotations

import contextlib
import functools
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from tunelab.errors import ConfigError, TunelabError
from tunelab.jsonfile import read_json, write_json
from tunelab.tuning.family import TunableFamily, get_family, next_pow2, problem_to_dict
from tunelab.tuning.space import config_key
from tunelab.tuning.study import device_slug

FORMAT = "tunelab.store"
EXPORT_FORMAT = "tunelab.store.export"
VERSION = 1

_SEQ_KEYS = ("seq_len", "seqlen", "S", "seq_q", "seq_len_q", "seqlen_q", "N")
_DIM_KEYS = ("head_dim", "D", "headdim")


class StaleConfigWarning(UserWarning):
    """A stored config was tuned for kernel sources that have changed since; it is not used."""


@dataclass
class LookupResult:
    """``status``: ``ok`` (entry usable), ``stale`` (source hash changed) or ``missing``."""

    status: str
    entry: dict | None = None
    reason: str = ""

    @property
    def config(self) -> dict | None:
        """The stored config when usable, else None."""
        return dict(self.entry["config"]) if self.status == "ok" and self.entry else None


def store_dir() -> Path:
    """``<cache_dir>/store`` (created on demand)."""
    from tunelab.paths import cache_dir

    p = cache_dir() / "store"
    p.mkdir(parents=True, exist_ok=True)
    return p


def store_path(device: str) -> Path:
    """The store file of a device name."""
    return store_dir() / f"{device_slug(device)}.json"


def _first(d: Mapping[str, Any], keys) -> tuple[str | None, Any]:
    for k in keys:
        if k in d:
            return k, d[k]
    return None, None


def attention_bucket(problem: Mapping[str, Any]) -> dict:
    """Attention bucket: next power of two of the sequence length; head dim, dtype and flags exact.

    Batch and head counts are dropped. Flags are every boolean in the problem (``causal`` ...).
    """
    _, seq = _first(problem, _SEQ_KEYS)
    if seq is None:
        raise ConfigError(f"cannot bucket attention problem {dict(problem)}: no sequence length among {_SEQ_KEYS}")
    _, dim = _first(problem, _DIM_KEYS)
    out = {"seq_bucket": next_pow2(int(seq)), "head_dim": dim, "dtype": str(problem.get("dtype"))}
    seq_k_key, seq_k = _first(problem, ("seq_k", "seq_len_k", "seqlen_k"))
    if seq_k is not None:
        out["seq_k_bucket"] = next_pow2(int(seq_k))
    for k, v in sorted(problem.items()):
        if isinstance(v, bool):
            out[k] = v
    return out


@functools.lru_cache(maxsize=32)
def _named_family(name: str) -> TunableFamily | None:
    try:
        return get_family(name)
    except ConfigError:  # no family by that name here
        return None


def bucket_of(family: TunableFamily | str, problem: Any) -> dict:
    """The store bucket of a problem: the family's own ``store_key`` (a name is looked up with ``get_family``),
    attention's rule for the attention family (for a name, on the problem as given: the keys stored entries have),
    the generic rule (integers to the next power of two) otherwise."""
    named = isinstance(family, str)
    fam = _named_family(family) if named else family
    if fam is not None and type(fam).store_key is not TunableFamily.store_key:
        return dict(fam.store_key(problem))
    pdict = problem_to_dict(problem) if named or fam is None else fam.problem_dict(problem)
    if (family if named else getattr(family, "name", "")) == "attention":
        return attention_bucket(pdict)
    return {k: (next_pow2(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in pdict.items()}


def entry_key(family: str, bucket: Mapping[str, Any]) -> str:
    """``family|k=v,...`` with sorted keys (the bucket's :func:`~tunelab.tuning.space.config_key`)."""
    return family + "|" + config_key(bucket)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    lock = path.with_suffix(path.suffix + ".lock")
    with open(lock, "a+") as fh:
        try:
            import fcntl

            fcntl.flock(fh, fcntl.LOCK_EX)
        except ImportError:  # pragma: no cover - non-POSIX: best effort
            pass
        yield


def _read(path: Path) -> dict:
    if not path.is_file():
        return {"format": FORMAT, "version": VERSION, "device": None, "entries": {}}
    data = read_json(path, "tuned-config store", invalid_hint="move it away and re-tune or re-import")
    if data.get("format") != FORMAT or data.get("version") != VERSION:
        raise TunelabError(f"{str(path)!r} is not a version-{VERSION} tunelab store file (it says format "
                           f"{data.get('format')!r}, version {data.get('version')!r}): move it away, then re-tune or "
                           f"re-import an export made by this tunelab version")
    return data


_on_write: list[Callable[[], None]] = []


def on_write(callback: Callable[[], None]) -> None:
    """Call ``callback()`` after every write of a store file by this process (once per callback, however often it
    is registered): ``tunelab.ops.dispatch`` drops the configs it resolved, so an op called after ``tune()`` or an
    import in the same process uses the new entry."""
    if callback not in _on_write:
        _on_write.append(callback)


def _write(path: Path, data: dict) -> None:
    write_json(path, data, sort_keys=True)
    _cached_read.cache_clear()
    for callback in _on_write:
        callback()


@functools.lru_cache(maxsize=64)
def _cached_read(path: str, mtime_ns: int) -> dict:
    return _read(Path(path))


def _load(path: Path) -> dict:
    # Dispatch calls lookup on every op call: parse the file once per modification, not per call.
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        return {"format": FORMAT, "version": VERSION, "device": None, "entries": {}}
    return _cached_read(str(path), mtime)


def put(entry: Mapping[str, Any]) -> Path:
    """Insert or replace an entry (keyed by family and bucket) in its device's store file."""
    for k in ("family", "device", "bucket", "config", "source_hash"):
        if k not in entry:
            raise ConfigError(f"store entry lacks {k!r}")
    path = store_path(entry["device"])
    with _locked(path):
        data = _read(path)
        data["device"] = entry["device"]
        data["entries"][entry_key(entry["family"], entry["bucket"])] = dict(entry)
        _write(path, data)
    return path


def put_result(result, family: TunableFamily) -> Path:
    """Store the confirmed best config of a :class:`~tunelab.tuning.results.TuneResult`."""
    d = result.data
    conf = result.confirmation
    if conf is None or conf.best is None:
        raise TunelabError("only a confirmed result can be stored: this study ran without confirmation (--no-confirm "
                           "or confirm=False); rerun it with confirmation to store its winner")
    best = conf.arm(conf.best)
    sp = conf.speedup_vs_baseline
    sd = conf.speedup_vs_default
    problem = family.problem_from_dict(d["problem"]) if hasattr(family, "problem_from_dict") else d["problem"]
    entry = {
        "family": d["family"], "device": d["device"].get("name", "unknown device"),
        "device_uuid": d["device"].get("uuid"), "bucket": bucket_of(family, problem), "problem": d["problem"],
        "config": best.config, "source_hash": d.get("source_hash", ""), "latency_us": best.summary["median"],
        "latency_ci": best.ci.to_dict(), "verdict": result.verdict,
        "beats_baseline": bool(conf.verdict is not None and conf.verdict.win and conf.best_baseline is not None),
        "speedup": None if sp is None else dict(sp.to_dict(), against=conf.best_baseline),
        "speedup_vs_default": None if sd is None else sd.to_dict(),
        "study": d.get("study", {}).get("name"), "created": d.get("created"),
        "tunelab_version": d.get("env", {}).get("tunelab_version") or d.get("env", {}).get("tunelab"),
    }
    return put(entry)


@functools.lru_cache(maxsize=32)
def _family_hash(name: str) -> str:
    return get_family(name).source_hash() or ""


def _device_name(device: Any) -> str:
    if isinstance(device, str):
        return device
    if isinstance(device, int):
        from tunelab import _core

        return _core.device_info(device)["name"]
    try:  # torch.device
        import torch

        if isinstance(device, torch.device):
            return torch.cuda.get_device_name(device)
    except ImportError:
        pass
    raise ConfigError(f"device {device!r} is not understood; pass a device name, an index or a torch.device")


def lookup_entry(family: TunableFamily | str, device: Any, problem: Any,
                 source_hash: str | None = None) -> LookupResult:
    """Find the entry for ``problem``'s bucket on ``device`` and check its source hash.

    ``source_hash`` defaults to the family's current one. Returns a :class:`LookupResult`.
    """
    name = family if isinstance(family, str) else family.name
    dev = _device_name(device)
    data = _load(store_path(dev))
    entry = data["entries"].get(entry_key(name, bucket_of(family, problem)))
    if entry is None:
        return LookupResult("missing")
    if source_hash is None:
        source_hash = family.source_hash() if isinstance(family, TunableFamily) else _family_hash(name)
    if (entry.get("source_hash") or "") != (source_hash or ""):
        return LookupResult("stale", entry, f"tuned with kernel sources {entry.get('source_hash')!r}, current "
                                            f"sources are {source_hash!r}; re-tune with `tunelab tune {name} ...`")
    return LookupResult("ok", entry)


def lookup(family: TunableFamily | str, device: Any, problem: Any, source_hash: str | None = None) -> dict | None:
    """The stored config for ``problem`` on ``device``, or None (missing or stale; stale entries warn)."""
    res = lookup_entry(family, device, problem, source_hash)
    if res.status == "stale":
        warnings.warn(f"stored {family if isinstance(family, str) else family.name} config for "
                      f"{res.entry.get('bucket')} on {res.entry.get('device')} is stale: {res.reason}",
                      StaleConfigWarning, stacklevel=2)
    return res.config


def entries(device: str | None = None) -> list[dict]:
    """Every stored entry (of one device, or of all devices)."""
    paths = [store_path(device)] if device else sorted(store_dir().glob("*.json"))
    out = []
    for p in paths:
        out.extend(_read(p)["entries"].values())
    return out


def export_store(path: str | os.PathLike, device: str | None = None) -> int:
    """Write every entry (of ``device``, or all) to a portable JSON file; returns the entry count."""
    devices: dict[str, dict] = {}
    for e in entries(device):
        devices.setdefault(e["device"], {})[entry_key(e["family"], e["bucket"])] = e
    write_json(path, {"format": EXPORT_FORMAT, "version": VERSION, "devices": devices}, sort_keys=True)
    return sum(len(v) for v in devices.values())


def import_store(path: str | os.PathLike, overwrite: bool = False) -> dict:
    """Merge an exported file into the local store.

    An incoming entry replaces a local one only when it is newer (``created``) or ``overwrite`` is set.
    Returns counts ``{"added", "replaced", "kept"}``.
    """
    p = Path(path)
    doc = read_json(p, "import file", missing_hint="create one with `tunelab export FILE`")
    if doc.get("format") != EXPORT_FORMAT or doc.get("version") != VERSION:
        raise TunelabError(f"{str(p)!r} is not a tunelab store export (format {EXPORT_FORMAT!r} v{VERSION}); "
                           "create one with `tunelab export FILE`")
    counts = {"added": 0, "replaced": 0, "kept": 0}
    for dev, ents in doc["devices"].items():
        target = store_path(dev)
        with _locked(target):
            data = _read(target)
            data["device"] = dev
            for key, e in ents.items():
                old = data["entries"].get(key)
                if old is None:
                    counts["added"] += 1
                elif overwrite or str(e.get("created") or "") > str(old.get("created") or ""):
                    counts["replaced"] += 1
                else:
                    counts["kept"] += 1
                    continue
                data["entries"][key] = e
            _write(target, data)
    return counts
