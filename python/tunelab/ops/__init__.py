"""User-facing kernels, registered as torch custom ops (``torch.ops.tunelab.*``); a plain eager call on plain tensors
runs the implementation without the custom op's dispatch (:mod:`tunelab.ops.eager`).

``tunelab.ops.attention(q, k, v, causal=..., scale=..., config=..., return_lse=...)``: see
:mod:`tunelab.ops.attention`. ``tunelab.ops.similarity_search(queries, corpus, k, metric=...)`` and
``tunelab.ops.gram(states, symmetric=True)``: see :mod:`tunelab.ops.similarity`. Submodules import torch;
``import tunelab`` alone does not.
"""
from __future__ import annotations


def __getattr__(name: str):
    if name == "attention":
        from tunelab.ops.attention import attention

        return attention
    # -- similarity family (issue 5): tunelab.ops.similarity_search, tunelab.ops.gram, tunelab.ops.similarity --
    if name in ("similarity_search", "gram", "similarity", "streaming"):
        import importlib

        module = importlib.import_module("tunelab.ops.similarity")
        return module if name == "similarity" else (
            importlib.import_module("tunelab.ops.streaming") if name == "streaming" else getattr(module, name))
    raise AttributeError(f"module 'tunelab.ops' has no attribute {name!r}")
