"""NVRTC compiler, ptxas resource report and the on-disk kernel cache (CPU only)."""
from __future__ import annotations

import concurrent.futures as cf
from pathlib import Path

import pytest

import tunelab
from tunelab import _core
from tunelab.errors import CompileError, ConfigError

TEMPLATED = r"""
template <typename T, int N>
__global__ void axpy_unrolled(const T* __restrict__ x, T* __restrict__ y, T a, int n) {
    int base = (blockIdx.x * blockDim.x + threadIdx.x) * N;
    #pragma unroll
    for (int i = 0; i < N; ++i)
        if (base + i < n) y[base + i] += a * x[base + i];
}
"""

# A per-thread array indexed in a data-dependent order: plenty of live values, so a low register cap spills.
REGISTER_HUNGRY = r"""
__global__ void hungry(const float* __restrict__ in, float* __restrict__ out) {
    float acc[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = in[threadIdx.x * 64 + i];
    float s = 0.f;
    #pragma unroll
    for (int i = 0; i < 64; ++i) s += acc[i] * acc[(i * 7) % 64];
    out[threadIdx.x] = s;
}
"""

EXPRS = ["axpy_unrolled<float, 4>", "axpy_unrolled<__half, 8>"]
SRC = "#include <cuda_fp16.h>\n" + TEMPLATED


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_templated_kernel_compiles_for_real_arch(arch, tmp_path):
    r = _core.compile(SRC, EXPRS, arch, cache_dir=str(tmp_path))
    assert r.cubin[:4] == b"\x7fELF", "NVRTC must return a cubin (ELF), not PTX"
    assert r.arch == arch and not r.cache_hit
    for expr in EXPRS:
        lowered = r.lowered_names[expr]
        assert lowered.startswith("_Z13axpy_unrolled")
        usage = r.resources[expr]
        assert usage.registers > 0 and usage.spill_store_bytes == 0
        assert r.resources[lowered].registers == usage.registers
    assert f"-arch={arch}" in r.options and "-Xptxas=-v" in r.options
    assert "Used" in r.log  # the ptxas report the resources were parsed from


def test_register_cap_causes_spills_that_are_reported(tmp_path):
    free = _core.compile(REGISTER_HUNGRY, ["hungry"], "sm_90", cache_dir=str(tmp_path)).resources["hungry"]
    capped = _core.compile(REGISTER_HUNGRY, ["hungry"], "sm_90", max_registers=24,
                           cache_dir=str(tmp_path)).resources["hungry"]
    assert free.spill_store_bytes == 0 and free.spill_load_bytes == 0 and free.registers > 24
    assert capped.registers <= 24
    assert capped.spill_store_bytes > 0 and capped.spill_load_bytes > 0 and capped.stack_bytes > 0
    assert capped.spills and not free.spills


def test_second_compile_is_a_cache_hit_with_identical_result(tmp_path):
    first = _core.compile(SRC, EXPRS, "sm_90", cache_dir=str(tmp_path))
    second = _core.compile(SRC, EXPRS, "sm_90", cache_dir=str(tmp_path))
    assert not first.cache_hit and second.cache_hit
    assert second.cubin == first.cubin and second.key == first.key
    assert second.lowered_names == first.lowered_names
    assert second.resources[EXPRS[0]].registers == first.resources[EXPRS[0]].registers
    # A different option, arch, define or header is a different key.
    assert _core.compile(SRC, EXPRS, "sm_80", cache_dir=str(tmp_path)).key != first.key
    assert _core.compile(SRC, EXPRS, "sm_90", defines={"X": "1"}, cache_dir=str(tmp_path)).key != first.key
    assert _core.compile(SRC, EXPRS, "sm_90", headers={"a.h": "//"}, cache_dir=str(tmp_path)).key != first.key


def test_include_dir_contents_are_part_of_the_key(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "factor.cuh").write_text("#define FACTOR 2\n")
    src = '#include "factor.cuh"\nextern "C" __global__ void k(float* x) { x[0] *= FACTOR; }\n'
    cache = str(tmp_path / "cache")
    a = _core.compile(src, ["k"], "sm_90", include_dirs=[str(inc)], cache_dir=cache)
    (inc / "factor.cuh").write_text("#define FACTOR 3\n")
    b = _core.compile(src, ["k"], "sm_90", include_dirs=[str(inc)], cache_dir=cache)
    assert a.key != b.key and not b.cache_hit, "an edited header must not be served from the cache"


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage"])
def test_corrupt_cache_entry_is_detected_and_rebuilt(tmp_path, damage):
    cache = str(tmp_path)
    good = _core.compile(SRC, EXPRS, "sm_90", cache_dir=cache)
    path = Path(_core.cache_entry_path(good.key, cache))
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1:])
    else:
        path.write_bytes(b"not a cache entry at all")
    rebuilt = _core.compile(SRC, EXPRS, "sm_90", cache_dir=cache)
    assert not rebuilt.cache_hit and rebuilt.recovered_corrupt_entry
    assert rebuilt.cubin == good.cubin
    again = _core.compile(SRC, EXPRS, "sm_90", cache_dir=cache)
    assert again.cache_hit and again.cubin == good.cubin


def test_compile_error_carries_log_and_options(tmp_path):
    with pytest.raises(CompileError) as info:
        _core.compile('extern "C" __global__ void k(float* x) { x[0] = undeclared_name; }', ["k"], "sm_90",
                      cache_dir=str(tmp_path))
    err = info.value
    assert "undeclared_name" in err.log and "undeclared_name" in str(err)
    assert "-arch=sm_90" in err.options
    assert isinstance(err, tunelab.TunelabError)


def test_kernel_compile_error_names_the_config():
    k = tunelab.Kernel('template <int N> __global__ void k(float* x) { static_assert(N % 2 == 0, "N even"); }',
                       "k<{N}>", launch=lambda c, x: (1, 1))
    k.compile({"N": 2}, "sm_90")
    with pytest.raises(CompileError) as info:
        k.compile({"N": 3}, "sm_90")
    assert info.value.config == {"N": 3} and "N even" in str(info.value)


def test_parse_define_splits_macro_and_value_and_names_bad_text():
    """A command line's MACRO=VALUE (the benchmark scripts' and the emulator's --define) becomes a Kernel define that
    reaches the preprocessor; text without a value or a C identifier is refused, named in the error."""
    from tunelab.kernel import parse_define

    assert parse_define("TUNELAB_X=1") == ("TUNELAB_X", "1")
    assert parse_define("A=b=c") == ("A", "b=c")  # the first '=' splits
    for bad in ("NOVALUE", "X=", "=1", "1X=2", "A-B=1"):
        with pytest.raises(ConfigError) as info:
            parse_define(bad)
        assert repr(bad) in str(info.value) and "MACRO=VALUE" in str(info.value)
    key, value = parse_define("TUNELAB_TEST_WIDTH=3")
    k = tunelab.Kernel('__global__ void k(float* x) { static_assert(TUNELAB_TEST_WIDTH == 3, "width"); }', "k",
                       launch=lambda c, x: (1, 1), defines={key: value})
    k.compile({}, "sm_90")


def test_unknown_arch_is_rejected_with_the_accepted_list():
    with pytest.raises(ConfigError) as info:
        _core.compile(SRC, EXPRS, "sm_91")
    assert "sm_91" in str(info.value) and "sm_90" in str(info.value) and "sm_80" in str(info.value)


def test_sm90a_and_newer_archs_compile(tmp_path):
    archs = _core.supported_archs()
    assert {"sm_80", "sm_86", "sm_89", "sm_90"} <= set(archs)
    r = _core.compile(SRC, EXPRS, "sm_90a", cache_dir=str(tmp_path))
    assert r.cubin[:4] == b"\x7fELF"


def test_parallel_compiles_from_a_thread_pool(tmp_path):
    """The compiler releases the GIL and is safe from several threads."""
    cache = str(tmp_path)
    exprs = [f"axpy_unrolled<float, {n}>" for n in (1, 2, 3, 4, 5, 6, 7, 8)]
    with cf.ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda e: _core.compile(SRC, [e], "sm_90", cache_dir=cache), exprs))
    for e, r in zip(exprs, results):
        assert e in r.lowered_names and r.resources[e].registers > 0
    assert len({r.key for r in results}) == len(exprs)


def test_ptxas_report_parser():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_Z3fooPf' for 'sm_90'
ptxas info    : Function properties for _Z3fooPf
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 4096 bytes smem, 368 bytes cmem[0]
ptxas info    : Function properties for _Z6helperv
ptxas         .     99 bytes stack frame, 99 bytes spill stores, 99 bytes spill loads
ptxas info    : Compiling entry function 'bar' for 'sm_90'
ptxas info    : Function properties for bar
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers, 356 bytes cmem[0]
"""
    parsed = _core.parse_ptxas_report(log)
    assert set(parsed) == {"_Z3fooPf", "bar"}, "device functions must not appear as entries"
    foo = parsed["_Z3fooPf"]
    assert (foo.registers, foo.barriers, foo.static_smem_bytes, foo.constant_bytes) == (40, 1, 4096, 368)
    assert (foo.stack_bytes, foo.spill_store_bytes, foo.spill_load_bytes) == (16, 8, 4)
    assert parsed["bar"].registers == 8 and parsed["bar"].spill_store_bytes == 0


def test_static_shared_memory_is_reported(tmp_path):
    r = _core.compile('extern "C" __global__ void baz(float* x) { __shared__ float s[1024]; s[threadIdx.x] = x[0];'
                      ' __syncthreads(); x[1] = s[threadIdx.x ^ 1]; }', ["baz"], "sm_90", cache_dir=str(tmp_path))
    assert r.resources["baz"].static_smem_bytes == 4096
    assert r.resources["baz"].barriers == 1


def test_header_constant_reads_a_kernel_constant_and_names_a_missing_one(tmp_path):
    """tunelab.paths.header_constant reads ``constexpr int NAME = N;`` (indented or not, not a longer name that ends
    in NAME) from a header of the given tree, and from the installed kernels by default (MERGE=7's filter warps);
    a constant the header no longer declares is an error that names the header and the line it expected."""
    from tunelab.paths import header_constant

    (tmp_path / "fam").mkdir()
    (tmp_path / "fam" / "k.cuh").write_text("constexpr int kMaxCount = 9;\n  constexpr int kCount = 3;\n")
    assert header_constant("kCount", "fam/k.cuh", tmp_path) == 3
    assert header_constant("kMaxCount", "fam/k.cuh", tmp_path) == 9
    assert header_constant("kFilterWarpCount", "similarity/params.cuh") >= 1  # the installed tree by default
    with pytest.raises(RuntimeError, match=r"fam/k.cuh no longer says 'constexpr int kGone = N;'"):
        header_constant("kGone", "fam/k.cuh", tmp_path)
