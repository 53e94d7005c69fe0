"""JSON files of the tuner (results, replays, the tuned-config store, its exports): read with errors that name the
file and the fix, written atomically (temp file + rename, so a crash never leaves half a file). Paths ending in
``.gz`` are gzip-compressed both ways."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any, Callable

from tunelab.errors import ConfigError, TunelabError


def read_json(path: str | os.PathLike, what: str, *, missing_hint: str = "", invalid_hint: str = "") -> Any:
    """The parsed content of ``path`` (``what`` names it in errors, e.g. ``"replay file"``).

    Raises ConfigError when the file does not exist, TunelabError when it cannot be read or is not valid JSON (or
    not valid gzip), each followed by the hint given for that case.
    """
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"{what} {str(p)!r} does not exist" + (f"; {missing_hint}" if missing_hint else ""))
    if p.is_dir():
        raise ConfigError(f"{what} {str(p)!r} is a folder; give the path of the file in it")
    try:
        raw = p.read_bytes()
    except OSError as exc:  # permissions or I/O: not a question of the content
        raise TunelabError(f"{what} {str(p)!r} cannot be read ({exc}); check that you may read it") from None
    try:
        if p.suffix == ".gz":
            raw = gzip.decompress(raw)  # a corrupt gzip stream raises BadGzipFile (an OSError) or EOFError
        return json.loads(raw.decode())
    except (json.JSONDecodeError, UnicodeDecodeError, OSError, EOFError) as exc:
        raise TunelabError(f"{what} {str(p)!r} is not valid JSON ({exc})" +
                           (f"; {invalid_hint}" if invalid_hint else "")) from None


def write_json(path: str | os.PathLike, data: Any, *, indent: int | None = 1, sort_keys: bool = False,
               default: Callable[[Any], Any] | None = None) -> Path:
    """Write ``data`` to ``path`` via a temp file and a rename; creates the parent folder. ``.gz`` paths are written
    compact and gzipped with mtime 0 (the same data gives the same bytes: no spurious diffs in a repository)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + f".tmp{os.getpid()}")
    if p.suffix == ".gz":
        text = json.dumps(data, separators=(",", ":"), sort_keys=sort_keys, default=default)
        tmp.write_bytes(gzip.compress(text.encode(), mtime=0))
    else:
        tmp.write_text(json.dumps(data, indent=indent, sort_keys=sort_keys, default=default))
    os.replace(tmp, p)
    return p
