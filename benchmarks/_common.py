"""Helpers shared by the benchmark scripts: result files with the environment fingerprint, summaries."""
from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def int_list(text: str) -> list[int]:
    """argparse type of the scripts' comma-separated counts and sizes: "1,2,4" -> [1, 2, 4]."""
    try:
        return [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: pass comma-separated integers, e.g. 1,2,4") from None


def int_list_in(lo: int, hi: int, why: str):
    """argparse type: :func:`int_list` whose every value must lie in lo..hi (``why`` says what the range is)."""
    def parse(text: str) -> list[int]:
        values = int_list(text)
        bad = [x for x in values if not lo <= x <= hi]
        if bad:
            raise argparse.ArgumentTypeError(f"{text!r}: {bad} outside {lo}..{hi} ({why}); pass values in {lo}..{hi}")
        return values

    return parse


def nq_n(item: str) -> tuple[int, int] | None:
    """One search shape ``NQxN`` with positive integers -> (nq, n); None when ``item`` is not of that form."""
    nq, x, n = item.strip().lower().partition("x")
    if x and nq.isdigit() and n.isdigit() and int(nq) > 0 and int(n) > 0:
        return int(nq), int(n)
    return None


def nq_n_list(text: str) -> tuple[tuple[int, int], ...]:
    """argparse type of the scripts' search shapes: comma-separated NQxN, "1x1024,100x4096" -> ((1, 1024), (100,
    4096))."""
    out = []
    for item in text.split(","):
        shape = nq_n(item)
        if shape is None:
            raise argparse.ArgumentTypeError(f"{item!r} is not NQxN with positive integers (e.g. 100x4096)")
        out.append(shape)
    return tuple(out)


def int_in(lo: int, hi: int, why: str):
    """argparse type: one integer in lo..hi (``why`` says what the range is)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: pass an integer in {lo}..{hi} ({why})") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: outside {lo}..{hi} ({why}); pass a value in {lo}..{hi}")
        return value

    return parse


def names_in(choices, option: str, example: str):
    """argparse type: a comma-separated list of ``choices`` (spaces allowed, each once, in the order given); an
    unknown name, or none, is refused naming ``option``, the accepted names and ``example``."""
    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))
        bad = [x for x in names if x not in choices]
        if bad or not names:
            what = f"{', '.join(map(repr, bad))} not among them" if bad else "it names none"
            raise argparse.ArgumentTypeError(f"{option} {text!r}: expected a comma-separated list of "
                                             f"{', '.join(choices)}, e.g. {example} ({what})")
        return names

    return parse


def named_pairs(option: str, form: str, example: str, pair, reserved=()):
    """argparse type: ``NAME:KEY=VALUE[,KEY=VALUE...]`` -> (NAME, {KEY: VALUE}), ``pair`` parsing one ``KEY=VALUE``
    (raising ValueError or tunelab's ConfigError with what is wrong; e.g. tunelab.kernel.parse_define for macros).
    A missing NAME, a NAME among ``reserved`` and a bad pair are refused naming ``option``, ``form`` (the pairs'
    form, e.g. "MACRO=VALUE"), the part that is wrong and ``example``."""
    from tunelab.errors import ConfigError

    def parse(text: str) -> tuple[str, dict]:
        name, sep, rest = text.partition(":")
        name = name.strip()
        try:
            if not name or not sep:
                raise ValueError("no NAME: before the pairs")
            if name in reserved:
                raise ValueError(f"NAME {name!r} is taken by {', '.join(reserved)}; pick another")
            return name, dict(pair(item.strip()) for item in rest.split(","))
        except (ValueError, ConfigError) as exc:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: expected NAME:{form}[,{form}...], e.g. {example} "
                                             f"({exc})") from None

    return parse


def int_pair(text: str) -> tuple[str, int]:
    """``KEY=INT`` (a config entry of :func:`named_pairs`) -> (KEY, int); ValueError naming the text otherwise."""
    key, eq, value = text.partition("=")
    try:
        if key.strip() and eq:
            return key.strip(), int(value)
    except ValueError:
        pass
    raise ValueError(f"{text!r} is not KEY=INTEGER")


def headers_dir(*required: str):
    """argparse type: a directory laid out as csrc/kernels with the headers of an A/B's before arm
    (:func:`kernel_variant`'s ``headers``), holding each of ``required`` (paths inside it), or any header."""
    def parse(text: str) -> Path:
        d = Path(text)
        missing = [r for r in required if not (d / r).is_file()]
        if missing or not any(d.rglob("*.cuh")):
            what = ", ".join(missing) if missing else "header (.cuh)"
            raise argparse.ArgumentTypeError(f"{text!r} holds no {what}: make the directory with git show or git "
                                             f"archive (the script's docstring says how)")
        return d

    return parse


@contextlib.contextmanager
def kernel_variant(*, defines: dict[str, str] | None = None, headers: Path | None = None):
    """Inside the block, every NVRTC compile of the similarity ops gets ``defines`` added to its own and, with
    ``headers`` (a directory laid out as csrc/kernels, holding only the files to replace), reads a copy of the
    installed kernel tree with those files in place of the installed ones: two versions of a kernel in one process,
    timed interleaved (the compile cache keys on the headers' text and the defines). The ops' compiled-config cache
    is cleared on entry and on exit."""
    import shutil
    import tempfile

    import tunelab.paths
    from tunelab.ops import similarity as sim

    real_compile, real_dir = sim._core.compile, tunelab.paths.kernels_dir
    tmp = None
    if headers is not None:
        tmp = Path(tempfile.mkdtemp(prefix="tunelab_kernels_"))
        shutil.copytree(real_dir(), tmp / "kernels")
        for f in Path(headers).rglob("*"):
            if f.is_file():
                shutil.copy2(f, tmp / "kernels" / f.relative_to(headers))
        tunelab.paths.kernels_dir = lambda: tmp / "kernels"
    if defines:
        def patched(src, names, arch, opts, defs, *rest):
            return real_compile(src, names, arch, opts, {**defs, **defines}, *rest)

        sim._core.compile = patched
    sim._COMPILED.clear()
    try:
        yield
    finally:
        sim._core.compile, tunelab.paths.kernels_dir = real_compile, real_dir
        sim._COMPILED.clear()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def speedup(base_us, ours_us) -> dict:
    """How many times faster ``ours_us`` is than ``base_us`` (two sets of µs samples, unpaired): the ratio of their
    medians and its bootstrap 95% CI, as the results files record it ({"estimate", "ci95": [low, high]})."""
    from tunelab.stats import speedup_ci

    ci = speedup_ci(base_us, ours_us, paired=False, n_resamples=2000, seed=0)
    return {"estimate": ci.estimate, "ci95": [ci.low, ci.high]}


def summarize(samples_us) -> dict[str, float]:
    """Median, mean, min, p10/p90 and the bootstrap 95% CI of the median of a set of samples (µs)."""
    a = np.asarray(samples_us, dtype=np.float64)
    out = {"n": int(a.size), "median": float(np.median(a)), "mean": float(a.mean()), "min": float(a.min()),
           "p10": float(np.percentile(a, 10)), "p90": float(np.percentile(a, 90))}
    from tunelab.stats import median_ci

    ci = median_ci(a, seed=0)
    out["ci95"] = [float(ci.low), float(ci.high)]
    return out


def current_stream() -> int:
    """The handle of torch's current CUDA stream on the current device, as prepared launches take it (looked up at
    each call, so a launch inside a CUDA graph capture goes to the capturing stream): the ops' own accessor,
    tunelab.ops.loading.current_stream, which is ~10x cheaper than torch's public one in a timed lambda."""
    import torch

    from tunelab.ops.loading import current_stream as on_device

    return on_device(torch.cuda.current_device())


#: A kernel that only reads its input (16-byte streaming loads, nothing written): the floor of any search over the
#: same bytes (corpus_reader()).
READ_SRC = r"""
template <int UNROLL>
__global__ void read_all(const uint4* __restrict__ x, long long n16, unsigned* out) {
  unsigned acc = 0;
  const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
  long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < n16; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = __ldcs(x + i + u * stride);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n16; i += stride) {
    const uint4 v = __ldcs(x + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) out[0] = acc;  // never true for the data here; keeps the loads
}
"""


def corpus_reader():
    """``reader(t)``: a prepared launch of the read-only kernel (READ_SRC, 4 blocks of 512 threads per SM) over the
    bytes of the contiguous GPU tensor ``t``, which must stay alive while the launch is used."""
    import torch

    import tunelab

    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    kern = tunelab.Kernel(READ_SRC, "read_all<{UNROLL}>", launch=lambda cfg, x, n16, out: (sms * 4, 512))
    sink = torch.zeros(1, dtype=torch.int32, device="cuda")

    def reader(t):
        flat = t.view(-1).view(torch.int32)
        return kern.prepare({"UNROLL": 4}, flat, flat.numel() // 4, sink)

    return reader


#: How L2 is left before each timed call (l2_preparations(), time_after()): "write" the protocol's flush (a buffer of
#: tunelab.timing.l2_flush_bytes() written: L2 full of dirty lines, each of which a later allocation must first write
#: back to HBM), "read" a streaming read of such a buffer (the same eviction, no dirty lines), "none" nothing (what the
#: previous call of the same callable left: back-to-back calls, as in an application's loop).
L2_STATES = ("write", "read", "none")


#: argparse type of --l2: comma-separated names of L2_STATES
l2_states = names_in(L2_STATES, "--l2", "write,read")


def l2_preparations(reader) -> dict:
    """State name (L2_STATES) -> the keyword arguments of tunelab.timing.time_callable that leave L2 so before each
    sample: "write" the protocol's own flush, "read" no flush but a read of a buffer of l2_flush_bytes() (``reader``:
    corpus_reader()'s, as its ``prepare``; the prepared launch holds the buffer), "none" neither."""
    import torch

    from tunelab.timing import l2_flush_bytes

    buf = torch.empty(l2_flush_bytes() // 4, dtype=torch.int32, device="cuda")
    return {"write": {"flush_l2": True}, "read": {"flush_l2": False, "prepare": reader(buf)},
            "none": {"flush_l2": False}}


def time_rounds(calls: dict, *, rounds: int, samples: int) -> dict:
    """Interleaved samples of the core's timer: ``calls`` maps a key to (callable, keyword arguments of
    tunelab.timing.time_callable); ``rounds`` rounds over them, each call one untimed warm-up then ``samples``
    samples (A B C A B C ..., so that drift hits every call alike). A callable is a Python one (no arguments, it
    launches on the current stream) or a prepared launch. Returns key -> µs array."""
    from tunelab.timing import time_callable

    out = {key: [] for key in calls}
    for _ in range(rounds):
        for key, (fn, kwargs) in calls.items():
            out[key].extend(time_callable(fn, warmup=1, samples=samples, **kwargs))
    return {k: np.asarray(v) for k, v in out.items()}


def time_after(fns: dict, plan: list[tuple[str, str]], preparations: dict, *, rounds: int, samples: int) -> dict:
    """time_rounds() over each (state, name) of ``plan``: ``fns[name]`` after ``preparations[state]``
    (l2_preparations(); the untimed call first, so the first "none" sample follows a call of the same callable).
    Returns (state, name) -> µs array."""
    return time_rounds({(state, name): (fns[name], preparations[state]) for state, name in plan}, rounds=rounds,
                       samples=samples)


#: how draw_search_inputs() draws the random inputs from one generator
DRAW_ORDERS = ("corpus-first", "queries-first")


def draw_search_inputs(nq: int, n: int, d: int, dtype, order: str = "corpus-first", seed: int = 0):
    """(queries, corpus) on the GPU from one CUDA generator seeded with ``seed``. ``order``: "corpus-first" draws
    the corpus, then the queries, directly in ``dtype`` (as similarity_probe.py has always made them);
    "queries-first" draws the queries, then the corpus, in float32 and casts them. Statistically the same data;
    a different draw (benchmarks/similarity_gap.py and similarity_probe.py compare them)."""
    import torch

    if order not in DRAW_ORDERS:
        raise ValueError(f"order={order!r} is not one of {DRAW_ORDERS}")
    g = torch.Generator(device="cuda").manual_seed(seed)
    if order == "corpus-first":
        corpus = torch.randn((n, d), generator=g, device="cuda", dtype=dtype)
        queries = torch.randn((nq, d), generator=g, device="cuda", dtype=dtype)
    else:
        queries = torch.randn((nq, d), generator=g, device="cuda").to(dtype)
        corpus = torch.randn((n, d), generator=g, device="cuda").to(dtype)
    return queries, corpus


def write_result(name: str, payload: dict[str, Any], tag: str | None = None) -> Path:
    """Write ``payload`` plus the environment fingerprint to ``benchmarks/results/<name>[_<tag>].json`` (or $OUT
    too). ``tag`` (a script's ``--tag``) is joined to the name by one underscore, whether or not it starts with
    one: ``--tag h100`` and ``--tag _h100`` name the same file."""
    from tunelab.env import fingerprint
    from tunelab.jsonfile import write_json

    tag = (tag or "").lstrip("_")
    if tag:
        name = f"{name}_{tag}"
    doc = {"benchmark": name, "environment": fingerprint(), **payload}
    path = RESULTS / f"{name}.json"
    write_json(path, doc, indent=2, default=float)
    copy_to_out(path)
    return path


def copy_to_out(path: Path) -> None:
    """Copy a written result into $OUT when it is set: device runs bring back only what lies there."""
    extra = os.environ.get("OUT")
    if extra:
        import shutil

        dest = Path(extra) / Path(path).name
        Path(extra).mkdir(parents=True, exist_ok=True)
        if not dest.exists() or not dest.samefile(path):  # a result written straight into $OUT stays as it is
            shutil.copy(path, dest)


def warm_up_gpu(seconds: float = 2.0) -> float:
    """Keep the GPU busy with large matrix products for ``seconds`` so its clocks have ramped up before the
    first timed shape (an idle H200 sits at a few hundred MHz; the first shape measured cold read 30% slow).
    Returns the SM clock (MHz) seen afterwards, or -1 without NVML."""
    import time

    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            a @ a
        torch.cuda.synchronize()
    from tunelab.env import sm_clocks
    clocks = sm_clocks()
    return float(clocks["sm_mhz"]) if clocks else -1.0
