"""When the ops skip torch's custom-op dispatcher (``tunelab.ops.eager``): only for plain eager calls. Runs on the
CPU (the rule reads tensor types and torch's mode stacks, not devices); the GPU suite checks that the direct and
dispatched calls agree (tests/test_similarity_gpu.py::test_eager_calls_skip_the_dispatcher_and_reuse_launches)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch.overrides import TorchFunctionMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from tunelab.ops import eager  # noqa: E402


_SEEN: list = []


@torch.library.custom_op("tunelab::eager_probe", mutates_args=(), schema="(Tensor x, int n) -> Tensor")
def _probe_op(x, n):
    _SEEN.append("dispatched")
    return x + n


@_probe_op.register_fake
def _probe_fake(x, n):
    return torch.empty_like(x)


def _probe_impl(x, n):
    _SEEN.append("direct")
    return x + n


def test_call_goes_direct_for_plain_eager_calls_and_through_the_op_otherwise():
    _SEEN.clear()
    x = torch.zeros(3)
    assert torch.equal(eager.call("eager_probe", _probe_impl, x, 2), torch.full((3,), 2.0))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        eager.call("eager_probe", _probe_impl, x, 1)
    assert any(e.name == "tunelab::eager_probe" for e in prof.events())
    assert torch.equal(eager.call("eager_probe", _probe_impl, torch.zeros(3, requires_grad=True), 1), torch.ones(3))
    assert _SEEN == ["direct", "direct", "dispatched"]


def test_plain_tensors_go_direct():
    assert eager.direct_call_ok(torch.zeros(3, 4), torch.ones(5, 4))


def test_autograd_inputs_keep_the_dispatcher():
    assert not eager.direct_call_ok(torch.zeros(3, 4), torch.ones(5, 4, requires_grad=True))


def test_fake_tensors_keep_the_dispatcher():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.zeros(3, 4))
        assert not eager.direct_call_ok(fake)


class _DispatchPassthrough(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _FunctionPassthrough(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [_DispatchPassthrough, _FunctionPassthrough])
def test_dispatch_and_function_modes_keep_the_dispatcher(mode):
    x = torch.zeros(3, 4)
    with mode():
        assert not eager.direct_call_ok(x)
    assert eager.direct_call_ok(x)


def test_vmap_keeps_the_dispatcher():
    x = torch.zeros(3, 4)
    seen = []
    torch.vmap(lambda row: (seen.append(eager.direct_call_ok(row)), row.sum())[1])(x)
    assert seen == [False]


def test_profiler_label_only_while_recording():
    import contextlib

    assert isinstance(eager.profiled("tunelab::x"), contextlib.nullcontext)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with eager.profiled("tunelab::x"):
            torch.zeros(2).add_(1)
    assert any(e.name == "tunelab::x" for e in prof.events())


def test_torch_compile_keeps_the_dispatcher_without_a_graph_break():
    """Dynamo folds the rule to False before it reaches a private hook it cannot trace (a graph break there would
    run the rest of the op eagerly, outside the custom op)."""
    seen = []

    def fn(x):
        ok = eager.direct_call_ok(x)
        seen.append(ok)
        return x + 1 if ok else x - 1

    torch._dynamo.reset()
    out = torch.compile(fn, backend="eager", fullgraph=True)(torch.zeros(3))
    assert torch.equal(out, torch.full((3,), -1.0)) and seen == [False]
    # and call() traces to the custom op itself, whole (fullgraph: a graph break raises)
    torch._dynamo.reset()
    out = torch.compile(lambda x: eager.call("eager_probe", _probe_impl, x, 3), backend="eager", fullgraph=True)(
        torch.zeros(3))
    assert torch.equal(out, torch.full((3,), 3.0))
