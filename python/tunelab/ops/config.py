"""Kernel configs as the launchers take them: validation against a family's tunables, and a compact string form
(used by the custom ops, whose schema carries the config as a string, and by result files)."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from tunelab.errors import ConfigError


def canonical(config: Mapping[str, Any], names: Sequence[str], choices: Mapping[str, Sequence[int]],
              family: str) -> dict[str, int]:
    """``config`` as plain ints in ``names`` order; ConfigError naming unknown, missing or out-of-range values
    and the accepted ones (cross-parameter rules are the launcher's, checked when compiling)."""
    if not isinstance(config, Mapping):
        raise ConfigError(f"{family} config must be a dict of {list(names)}; got {type(config).__name__}")
    unknown = sorted(set(config) - set(names))
    if unknown:
        raise ConfigError(f"{family} config has unknown parameter(s) {unknown}; the parameters are {list(names)}")
    missing = [n for n in names if n not in config]
    if missing:
        raise ConfigError(f"{family} config is missing {missing}; the parameters are {list(names)}")
    out = {}
    for n in names:
        v = config[n]
        if isinstance(v, bool) or int(v) != v or int(v) not in choices[n]:
            raise ConfigError(f"{family} config {n}={v!r} is not accepted; accepted values are {list(choices[n])}")
        out[n] = int(v)
    return out


def to_string(config: Mapping[str, Any], names: Sequence[str]) -> str:
    """Compact identity of a config: ``"BLOCK_M=128,BLOCK_N=64,..."`` in ``names`` order."""
    return ",".join(f"{n}={int(config[n])}" for n in names)


def from_string(text: str) -> dict[str, int]:
    """Inverse of :func:`to_string` (not validated: pass the result to the family's canonical function)."""
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep:
            raise ConfigError(f"config string part {part!r} is not NAME=VALUE; expected e.g. 'BLOCK_M=128,BLOCK_N=64'")
        out[name.strip()] = int(value)
    return out
