"""The core on a real GPU: driver launches, occupancy vs the driver, the timer, the L2 flush, sticky errors."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tunelab
from tunelab import _core
from tunelab.timing import time_callable

pytestmark = pytest.mark.gpu

AXPY = r"""
template <int BLOCK, int ITEMS>
__global__ void __launch_bounds__(BLOCK) axpy(const float* __restrict__ x, float* __restrict__ y, float a, int n) {
    int base = blockIdx.x * BLOCK * ITEMS + threadIdx.x;
    #pragma unroll
    for (int i = 0; i < ITEMS; ++i) {
        int j = base + i * BLOCK;
        if (j < n) y[j] = a * x[j] + y[j];
    }
}
"""

READ = r"""
extern "C" __global__ void read_sum(const float4* __restrict__ x, float* out, long long n4) {
    float s = 0.f;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += (long long)gridDim.x * blockDim.x) {
        float4 v = x[i];
        s += v.x + v.y + v.z + v.w;
    }
    if (s == 12345.678f) out[0] = s;  // keeps the loads alive without a store per thread
}
"""

SMEM = r"""
template <int SMEM_BYTES>
__global__ void smem_user(float* out) {
    extern __shared__ float buf[];
    buf[threadIdx.x] = threadIdx.x;
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x] + SMEM_BYTES;
}
"""


@pytest.fixture(scope="module")
def torch():
    import torch as t
    t.cuda.init()
    return t


def _axpy_kernel():
    return tunelab.Kernel(AXPY, "axpy<{BLOCK}, {ITEMS}>",
                          launch=lambda c, x, y, a, n: ((n + c["BLOCK"] * c["ITEMS"] - 1) // (c["BLOCK"] * c["ITEMS"]),
                                                        c["BLOCK"]))


@pytest.mark.parametrize("cfg", [{"BLOCK": 128, "ITEMS": 1}, {"BLOCK": 256, "ITEMS": 4}, {"BLOCK": 64, "ITEMS": 3}])
def test_driver_launch_computes_the_right_result(torch, cfg):
    k = _axpy_kernel()
    n = 1_000_003  # not a multiple of any tile
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(n, device="cuda", generator=g)
    y0 = torch.randn(n, device="cuda", generator=g)
    y = y0.clone()
    k(cfg, x, y, 1.75, n)
    torch.cuda.synchronize()
    ref = (1.75 * x.double() + y0.double()).float()
    assert torch.equal(y, ref) or torch.allclose(y, ref, rtol=1e-6, atol=1e-6)
    assert not torch.isnan(y).any()


def test_param_info_matches_the_packed_arguments(torch):
    ck = _axpy_kernel().compile({"BLOCK": 128, "ITEMS": 1})
    x = torch.randn(8, device="cuda")
    pack = ck.pack([x, x, 1.0, 8])
    info = ck.function().param_info()
    assert [size for _, size in info] == pack.sizes == [8, 8, 4, 4]


def test_static_occupancy_equals_the_drivers(torch):
    arch = tunelab.current_arch()
    checked = 0
    for smem in (0, 20 * 1024, 60 * 1024, 100 * 1024, 150 * 1024):
        for threads in (64, 256, 1024):
            k = tunelab.Kernel(SMEM, "smem_user<{S}>", launch=lambda c, o: (1, threads, c["S"]))
            ck = k.compile({"S": smem})
            fn = ck.function()  # no set_max_dynamic_smem: driver_occupancy raises the limit above 48 KiB itself
            attrs = fn.attributes()
            static = _core.occupancy(arch, threads, attrs["num_regs"], attrs["shared_size_bytes"] + smem)
            assert static.blocks_per_sm == fn.driver_occupancy(threads, smem), (smem, threads, attrs)
            assert attrs["num_regs"] == ck.resources.registers
            checked += 1
    for regs in (32, 64, 128, 200):
        k = tunelab.Kernel(AXPY, "axpy<{BLOCK}, {ITEMS}>", launch=lambda c, *a: (1, 1))
        ck = k.compile({"BLOCK": 256, "ITEMS": 16}, max_registers=regs)
        fn = ck.function()
        r = fn.attributes()["num_regs"]
        assert _core.occupancy(arch, 256, r, 0).blocks_per_sm == fn.driver_occupancy(256, 0)
        checked += 1
    assert checked == 19


def test_timer_median_agrees_with_torch_events(torch):
    k = _axpy_kernel()
    n = 64 * 1024 * 1024
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    ck = k.compile({"BLOCK": 256, "ITEMS": 4})
    prepared = ck.prepare(x, y, 0.5, n)
    ours = np.median(time_callable(prepared, warmup=5, samples=50, flush_l2=False))
    start = [torch.cuda.Event(enable_timing=True) for _ in range(50)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(50)]
    for i in range(5):
        ck(x, y, 0.5, n)
    for i in range(50):
        start[i].record()
        ck(x, y, 0.5, n)
        end[i].record()
    torch.cuda.synchronize()
    theirs = np.median([s.elapsed_time(e) * 1000 for s, e in zip(start, end)])
    assert ours == pytest.approx(theirs, rel=0.05), (ours, theirs)
    # and a Python callable goes through the same loop
    via_callable = np.median(time_callable(lambda: ck(x, y, 0.5, n), warmup=5, samples=50, flush_l2=False))
    assert via_callable == pytest.approx(theirs, rel=0.05)


def _reader(torch, nbytes: int):
    """A prepared read_sum over a new float tensor of ``nbytes`` (a multiple of 16), and the tensor."""
    x = torch.randn(nbytes // 4, device="cuda")
    k = tunelab.Kernel(READ, "read_sum", launch=lambda c, x, o, n: (264, 512))
    return k.compile({}).prepare(x, torch.zeros(1, device="cuda"), nbytes // 16), x


def _small_axpy(torch, n: int = 4096):
    """A prepared axpy over two new float tensors of ``n`` (16 KB by default: a few microseconds), and the tensors."""
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    return _axpy_kernel().compile({"BLOCK": 256, "ITEMS": 1}).prepare(x, y, 1.0, n), x, y


def test_l2_flush_visibly_changes_a_bandwidth_bound_kernel(torch):
    l2 = _core.device_info(0)["l2_bytes"]
    assert tunelab.timing.l2_flush_bytes() >= 2 * l2
    prepared, x = _reader(torch, (l2 // 4) // 16 * 16)  # a quarter of L2: fits when warm
    warm = np.median(time_callable(prepared, samples=50, flush_l2=False))
    cold = np.median(time_callable(prepared, samples=50, flush_l2=True))
    assert cold > 1.2 * warm, f"flushed {cold:.2f} us vs warm {warm:.2f} us: the flush should evict the input"


def test_prepare_runs_once_before_each_sample_and_is_not_timed(torch):
    # prepare runs after the flush and before the first event: once a sample, not in warm-up, never in the samples.
    prepared, x, y = _small_axpy(torch)
    calls = []

    def slow_prepare():  # ~1 ms of GPU time on the stream before each sample
        calls.append(1)
        torch.cuda._sleep(2_000_000)

    plain = np.median(time_callable(prepared, warmup=3, samples=20))
    after = time_callable(prepared, warmup=3, samples=20, prepare=slow_prepare)
    assert len(calls) == 20
    assert np.median(after) < plain + 100.0, (np.median(after), plain)
    # A prepared launch as prepare: a read of a buffer twice the L2 evicts a quarter-L2 input without the flush.
    read_small, small = _reader(torch, (_core.device_info(0)["l2_bytes"] // 4) // 16 * 16)
    read_big, big = _reader(torch, tunelab.timing.l2_flush_bytes() // 16 * 16)
    warm = np.median(time_callable(read_small, samples=50, flush_l2=False))
    evicted = np.median(time_callable(read_small, samples=50, flush_l2=False, prepare=read_big))
    assert evicted > 1.2 * warm, f"after a read of 2x L2 {evicted:.2f} us vs warm {warm:.2f} us"


def test_graph_mode_times_microsecond_kernels(torch):
    prepared, x, y = _small_axpy(torch)
    graph = time_callable(prepared, samples=30, cuda_graph=True, graph_launches=50)
    assert np.all(np.isfinite(graph)) and np.median(graph) > 0
    assert np.median(graph) < 20.0  # a 16 KB axpy is a few microseconds at most
    via_torch = time_callable(lambda: torch.add(x, y), samples=30, cuda_graph=True, graph_launches=50)
    assert np.median(via_torch) > 0


def test_launch_graph_replays_its_launches_in_order_and_joins_a_callers_capture(torch):
    """A LaunchGraph of two axpys (y += 2x, then y += 3x) replays both, in order, with one call; on a stream being
    captured into a caller's graph it launches them one by one, so they replay with the caller's graph."""
    ck = _axpy_kernel().compile({"BLOCK": 256, "ITEMS": 1})
    n = 4097
    x = torch.randn(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    launches = [ck.prepare(x, y, 2.0, n), ck.prepare(x, y, 3.0, n)]
    graph = _core.LaunchGraph(launches)
    stream = torch.cuda.current_stream().cuda_stream
    assert not _core.stream_is_capturing(stream)
    for _ in range(3):
        graph(stream)
    torch.cuda.synchronize()
    assert torch.allclose(y, 15.0 * x, rtol=1e-6, atol=1e-5)
    y.zero_()
    caller = torch.cuda.CUDAGraph()
    seen = []
    with torch.cuda.graph(caller):
        capture = torch.cuda.current_stream().cuda_stream
        seen.append(_core.stream_is_capturing(capture))
        graph(capture)
    torch.cuda.synchronize()
    assert seen == [True] and torch.count_nonzero(y) == 0  # captured, not run
    caller.replay()
    caller.replay()
    torch.cuda.synchronize()
    assert torch.allclose(y, 10.0 * x, rtol=1e-6, atol=1e-5)
    from tunelab.errors import ConfigError

    with pytest.raises(ConfigError, match="at least one launch"):
        _core.LaunchGraph([])
    # a worker thread that has not used CUDA yet (no context current) can ask, and replay
    import threading

    answers = []

    def worker():
        try:
            answers.append(_core.stream_is_capturing(0, 0))
            graph(0)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            answers.append(exc)

    y.zero_()
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    torch.cuda.synchronize()
    assert answers == [False] and torch.allclose(y, 5.0 * x, rtol=1e-6, atol=1e-5)


def test_out_of_bounds_write_reports_a_poisoned_context_in_a_subprocess():
    code = textwrap.dedent(r"""
        import tunelab
        from tunelab.errors import PoisonedContextError
        src = 'extern "C" __global__ void oob(float* p) { p[(long long)threadIdx.x * (1LL << 40)] = 1.0f; }'
        k = tunelab.Kernel(src, "oob", launch=lambda c, p: (1, 32))
        try:
            k({}, 1 << 20)
            tunelab._core.synchronize()
        except PoisonedContextError as e:
            print("POISONED", e.call, e.code)
            print(str(e))
        else:
            print("NO ERROR")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "POISONED" in out.stdout, out.stdout + out.stderr
    assert "poisoned" in out.stdout and "Restart the process" in out.stdout


def test_device_info_is_sane(torch):
    d = _core.device_info(0)
    props = torch.cuda.get_device_properties(0)
    assert d["sm_count"] == props.multi_processor_count
    assert d["name"] == props.name
    assert d["arch"] == f"sm_{props.major}{props.minor}"
    assert 0 < d["free_memory"] <= d["total_memory"]
