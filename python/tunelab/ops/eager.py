"""When an op may call its implementation directly instead of going through torch's custom-op dispatcher.

``torch.library.custom_op`` is what makes the ops traceable (``torch.compile``, ``torch.export``, fake tensors,
``vmap`` refusing cleanly), but in plain eager mode its Python dispatch costs ~20 us a call (the search op at
50K/100 on an H100: 59.1 us of host time through ``torch.ops.tunelab`` against 39.9 called directly,
``benchmarks/results/similarity_op_host_h100.json``), half the kernels' time of a 50K-row search. An eager call on
plain CUDA tensors with nothing intercepting torch gains nothing from the dispatcher, so the ops call their
implementation directly then and keep the custom op for everything else: :func:`call`.
"""
from __future__ import annotations

import contextlib


def call(name: str, impl, *args):
    """Run the custom op ``torch.ops.tunelab.<name>`` on ``args``: by calling ``impl``, the implementation the op is
    registered with, when :func:`direct_call_ok` holds for the tensors among ``args`` (named ``tunelab::<name>`` in
    the torch profiler while it records), else through torch's dispatcher."""
    import torch

    if direct_call_ok(*[a for a in args if isinstance(a, torch.Tensor)]):
        with profiled(f"tunelab::{name}"):
            return impl(*args)
    return getattr(torch.ops.tunelab, name)(*args)


def direct_call_ok(*tensors) -> bool:
    """True when an op called with ``tensors`` may skip the custom-op dispatcher: every tensor is a plain
    ``torch.Tensor`` (not a fake, functional or other subclass), nothing is being traced or compiled, and no
    torch-function mode, dispatch mode or functorch transform (``vmap``, ``grad``) is active."""
    import torch

    # first: under torch.compile this is a constant Dynamo folds, so it never traces (or breaks the graph on) the
    # private hooks below and keeps the custom op in the graph
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    if any(type(t) is not torch.Tensor or t.requires_grad for t in tensors):
        return False
    C = torch._C
    try:
        return not (C._len_torch_dispatch_stack() or C._is_torch_function_mode_enabled() or
                    C._are_functorch_transforms_active())
    except AttributeError:  # a torch without these hooks: keep the dispatcher
        return False


def profiled(name: str):
    """A context that labels the direct call as the custom op ``name`` in the torch profiler when it records (the
    dispatcher would have); a no-op otherwise."""
    import torch

    if torch.autograd._profiler_enabled():
        return torch.autograd.profiler.record_function(name)
    return contextlib.nullcontext()
