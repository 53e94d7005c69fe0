"""What must work, and how things must fail, on a machine without a GPU or driver (CI)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

import tunelab
from tunelab.errors import InputError, NoDeviceError

NO_GPU = not tunelab.gpu_available()[0]


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_import_does_not_need_torch_or_a_driver():
    # Block torch and the driver: `import tunelab` must still work and compile a kernel.
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import tunelab\n"
        "r = tunelab.compile('extern \"C\" __global__ void k(float* x) { x[0] = 1; }', ['k'], 'sm_80', use_cache=False)\n"
        "assert r.cubin[:4] == b'\\x7fELF'\n"
        "print('ok', tunelab.__version__)\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")


def test_ops_are_reachable_from_a_plain_import():
    """`import tunelab` then `tunelab.ops.similarity_search(...)`, as the README's example does (it failed with
    "module 'tunelab' has no attribute 'ops'" on the H200 at 8e977e0): the subpackage comes with the package, and
    torch is imported only when an op is first looked up."""
    code = (
        "import sys\n"
        "import tunelab\n"
        "assert 'torch' not in sys.modules, 'import tunelab imported torch'\n"
        "ops = tunelab.ops\n"
        "assert callable(ops.similarity_search) and callable(ops.gram) and callable(ops.attention)\n"
        "assert 'torch' in sys.modules\n"
        "print('ok')\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_cli_help_works_without_a_driver():
    out = subprocess.run([sys.executable, "-m", "tunelab.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for cmd in ("devices", "occupancy", "cache"):
        assert cmd in out.stdout


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: the no-driver path cannot be observed")
def test_launching_without_a_gpu_raises_a_clear_error():
    k = tunelab.Kernel('extern "C" __global__ void k(int n) {}', "k", launch=lambda c, n: (1, 32))
    with pytest.raises(NoDeviceError) as info:
        k({}, 5)
    msg = str(info.value)
    assert "libcuda" in msg or "GPU" in msg
    assert "Compiling kernels and static occupancy work without it" in msg or "no usable NVIDIA GPU" in msg


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU")
def test_devices_cli_reports_no_gpu(capsys):
    from tunelab.cli import main
    assert main(["devices"]) == 1
    assert "no GPU" in capsys.readouterr().out


def test_arguments_are_checked_against_the_signature_before_any_gpu_work():
    torch = pytest.importorskip("torch")
    src = "#include <cuda_fp16.h>\ntemplate <int B> __global__ void k(const __half* x, float* y, float a, int n) {}"
    k = tunelab.Kernel(src, "k<{B}>", launch=lambda c, x, y, a, n: (1, c["B"]))
    ck = k.compile({"B": 64}, "sm_90")
    assert [p.type for p in ck.signature] == ["__half*", "float*", "float", "int"]
    half = torch.ones(4, dtype=torch.float16)
    f32 = torch.ones(4)
    with pytest.raises(InputError, match="takes 4 arguments"):
        ck.pack([half, f32, 1.0])
    with pytest.raises(InputError, match="on cpu"):
        ck.pack([half, f32, 1.0, 4])
    with pytest.raises(InputError, match="is a scalar; got a tensor"):
        ck.pack([1, 2, f32, 4])
    with pytest.raises(InputError, match="'int'.*got a float|got a float"):
        ck.pack([1, 2, 1.0, 4.5])


def test_timer_arguments_are_checked_before_any_gpu_work():
    # A prepare that cannot be called, and a bad fn, are refused by name before the timer touches a device, in
    # Python (time_callable) and in the core's binding alike.
    from tunelab import _core
    from tunelab.errors import ConfigError
    from tunelab.timing import time_callable

    with pytest.raises(ConfigError, match=r"prepare must be a PreparedLaunch, a callable or None, got int"):
        time_callable(lambda: None, samples=1, prepare=3)
    with pytest.raises(ConfigError, match=r"fn must be a PreparedLaunch or a callable, got str"):
        time_callable("kernel", samples=1)
    with pytest.raises(ConfigError, match=r"prepare must be a PreparedLaunch, a callable or None, got int"):
        _core.time_launches(lambda: None, 0, 0, 1, False, 0, 3)
    with pytest.raises(ConfigError, match=r"fn must be a PreparedLaunch or a callable, got str"):
        _core.time_launches("kernel", 0, 0, 1, False, 0, None)


def test_signature_of_extern_c_kernel_comes_from_the_source():
    k = tunelab.Kernel('extern "C" __global__ void __launch_bounds__(128) plain(const float* __restrict__ x,'
                       ' unsigned long long n, double d) {}', "plain", launch=lambda c, *a: (1, 1))
    ck = k.compile({}, "sm_80")
    assert [p.type for p in ck.signature] == ["float*", "unsigned long long", "double"]
    pack = ck.pack([0x1000, 7, 2.5])  # a raw device address is accepted for a pointer
    assert pack.sizes == [8, 8, 8]


def test_config_values_become_defines_for_plain_kernels():
    src = 'extern "C" __global__ void k(float* x) { x[0] = TILE; }'
    k = tunelab.Kernel(src, "k", launch=lambda c, x: (1, 1))
    assert k.compile({"TILE": 3}, "sm_90").resources.registers > 0
    with pytest.raises(tunelab.CompileError):
        k.compile({}, "sm_90")  # TILE undefined without the config


def test_cache_cli(capsys, tmp_path, monkeypatch):
    from tunelab.cli import main
    monkeypatch.setenv("TUNELAB_CACHE_DIR", str(tmp_path))
    tunelab.compile('extern "C" __global__ void k(float* x) { x[0] = 2; }', ["k"], "sm_90")
    assert main(["cache", "info"]) == 0
    assert "entries: 1" in capsys.readouterr().out
    assert main(["cache", "clear"]) == 0
    assert "removed 1" in capsys.readouterr().out
    assert main(["cache", "info"]) == 0
    assert "entries: 0" in capsys.readouterr().out
