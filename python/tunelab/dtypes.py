"""Dtype names: the aliases every family and op accepts, and their long (torch) and short (CLI, store) forms.

::

    long_name("fp16") == "float16";  short_name("torch.bfloat16") == "bf16"
    canonical("half", ("float16", "bfloat16"), "the attention family") == "float16"
"""
from __future__ import annotations

from typing import Any, Iterable

from tunelab.errors import InputError

#: Every accepted spelling -> the torch name.
ALIASES: dict[str, str] = {
    "float16": "float16", "fp16": "float16", "half": "float16", "torch.float16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16", "torch.bfloat16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "torch.float32": "float32",
    "complex64": "complex64", "c64": "complex64", "torch.complex64": "complex64",
}
#: torch name -> short name.
SHORT: dict[str, str] = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "complex64": "complex64"}


def long_name(dtype: Any) -> str | None:
    """The torch name of ``dtype`` (a string alias or a torch dtype), or None when it is not known."""
    return ALIASES.get(str(dtype))


def short_name(dtype: Any) -> str | None:
    """The short name (``fp16``, ``bf16``, ``fp32``, ``complex64``) of ``dtype``, or None when it is not known."""
    name = long_name(dtype)
    return SHORT[name] if name else None


def canonical(dtype: Any, accepted: Iterable[str], what: str) -> str:
    """The torch name of ``dtype`` when it is one of ``accepted`` (torch names); InputError naming ``what``, the
    value and the accepted short names otherwise."""
    accepted = tuple(accepted)
    name = long_name(dtype)
    if name not in accepted:
        raise InputError(f"dtype {dtype!r} is not supported by {what}; use "
                         f"{', '.join(SHORT[a] for a in accepted)} (or {', '.join(accepted)})")
    return name
