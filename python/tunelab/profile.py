"""Nsight Compute (``ncu``) from Python: profile a program or one call of a tunelab op, read the hardware counters
of each kernel, and say what bounds it.

A timing says how fast a kernel is; the counters say why. ``ncu`` reads them by replaying each profiled kernel, so it
must start the program itself: :func:`profile` runs a command under ncu and :func:`profile_op` runs one call of an op
(``tunelab.profile_target``: random inputs, warm-up calls untimed and unprofiled, then one profiled call). ::

    from tunelab.profile import profile_op
    result = profile_op("similarity", shape=(100, 50000, 768, 10), dtype="fp16")
    print(result.table())               # one row per kernel: time, % of peak of SM / DRAM / L2, occupancy, bound
    result.kernels[0].metrics           # every counter ncu collected, by its ncu name
    result.report                       # the .ncu-rep file, for the Nsight Compute GUI (when a path was given)

The command line does the same (``tunelab.cli``): ``tunelab profile --op similarity --shape 100,50000,768,10`` or
``tunelab profile -- python my_script.py``.

What is collected: the sections in :data:`SECTIONS` (speed of light, launch statistics, occupancy, warp stall
reasons) plus :data:`DEFAULT_METRICS` and any ``metrics`` given. A metric name this GPU or ncu does not know is not
an error for ncu (it leaves it out); here it is listed in :attr:`ProfileResult.missing_metrics` and, when the caller
asked for it by name, raises :class:`ProfileError`. Clocks: ``clock_control="none"`` by default, as tunelab's timer
leaves them (ncu's own default locks them to base clock, which makes durations longer than the program sees); caches
are flushed before each replayed kernel (ncu's ``--cache-control all``). That flush leaves L2 clean, where the timer's
(a memset) leaves it full of dirty lines that a kernel must write back: on the H200 the 50K x 100 search takes 26.7
us under ncu (``benchmarks/results/profile_similarity_100x50000x768x10_h200.json``) and 33.6 under the timer
(``benchmarks/SIMILARITY.md``). ncu also serializes kernels and replays each several times, so its durations are not
the program's timings: use :mod:`tunelab.timing` for those.
"""
from __future__ import annotations

import csv
import functools
import io
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tunelab.errors import ConfigError, TunelabError

#: ncu sections collected for every kernel: what the summary and ncu's own rule messages need.
SECTIONS: tuple[str, ...] = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats")

#: Metrics collected besides the sections' (ncu names). The summary reads these.
DURATION = "gpu__time_duration.sum"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
L2_PCT = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
L1_PCT = "l1tex__throughput.avg.pct_of_peak_sustained_active"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
OCCUPANCY_PCT = "sm__warps_active.avg.pct_of_peak_sustained_active"
L1_ELAPSED_PCT = "l1tex__throughput.avg.pct_of_peak_sustained_elapsed"
SM_ACTIVE_CYCLES = "sm__cycles_active.avg"
SM_ELAPSED_CYCLES = "sm__cycles_elapsed.avg"
GPC_ELAPSED_CYCLES = "gpc__cycles_elapsed.avg"
DEFAULT_METRICS: tuple[str, ...] = (DURATION, SM_PCT, MEMORY_PCT, DRAM_PCT, L2_PCT, L1_PCT, L1_ELAPSED_PCT, DRAM_READ,
                                    DRAM_WRITE, OCCUPANCY_PCT, SM_ACTIVE_CYCLES, SM_ELAPSED_CYCLES)

#: Stall-reason metrics of the WarpStateStats section: cycles a warp spends stalled for that reason per issued
#: instruction (``no_instruction``: instruction-cache misses; ``long_scoreboard``: global memory; ``barrier``: block
#: barriers; ``wait``: fixed-latency dependencies).
_STALL = re.compile(r"^smsp__average_warps?_issue_stalled_(?P<reason>.+)_per_issue_active\.ratio$")
#: Occupancy limiters ncu reports (blocks per SM each resource allows).
_LIMITS = {"launch__occupancy_limit_registers": "registers", "launch__occupancy_limit_shared_mem": "shared memory",
           "launch__occupancy_limit_warps": "warps", "launch__occupancy_limit_blocks": "blocks per SM",
           "launch__occupancy_limit_barriers": "barriers"}
#: The ID columns that come before the metrics on ncu's raw page.
_ID_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
               "Grid Size", "Device", "CC")
#: Below this % of peak for both the SM and memory, a kernel is called latency-bound (ncu's own rules use 60%).
BUSY_PCT = 60.0

CLOCK_CONTROLS = ("none", "base")
CACHE_CONTROLS = ("all", "none")


class ProfileError(TunelabError):
    """ncu is missing, could not read the counters, the profiled program failed, or asked-for metrics are unknown."""


# ------------------------------------------------------------------------------------------------ finding ncu
def find_ncu(ncu: str | os.PathLike | None = None) -> str:
    """The path of the ``ncu`` executable: ``ncu`` if given, else ``$TUNELAB_NCU``, else ``ncu`` on ``PATH``, else
    the first of ``$CUDA_HOME/bin/ncu``, ``$CUDA_PATH/bin/ncu``, ``/usr/local/cuda/bin/ncu`` and the newest
    ``/opt/nvidia/nsight-compute/*/ncu`` that exists.

    Raises ProfileError naming every place looked at and how to point tunelab at ncu."""
    tried: list[str] = []
    explicit = ncu if ncu is not None else os.environ.get("TUNELAB_NCU")
    if explicit:
        path = shutil.which(str(explicit)) or (str(explicit) if Path(explicit).is_file() else None)
        if path and os.access(path, os.X_OK):
            return path
        where = "ncu=" if ncu is not None else "TUNELAB_NCU="
        raise ProfileError(f"{where}{explicit!s} is not an executable file; give the path of Nsight Compute's ncu")
    found = shutil.which("ncu")
    if found:
        return found
    tried.append("ncu on PATH")
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(Path(os.environ[var]) / "bin" / "ncu")
    candidates.append(Path("/usr/local/cuda/bin/ncu"))
    candidates += sorted(Path("/opt/nvidia/nsight-compute").glob("*/ncu"), key=_version_key, reverse=True)
    for c in dict.fromkeys(candidates):  # (CUDA_HOME is often /usr/local/cuda: each place once)
        tried.append(str(c))
        if c.is_file() and os.access(c, os.X_OK):
            return str(c)
    raise ProfileError("Nsight Compute's ncu was not found (looked at: " + ", ".join(tried) + "); install Nsight "
                       "Compute (it comes with the CUDA toolkit) and put ncu on PATH, or set TUNELAB_NCU=/path/to/ncu")


def _version_key(path: Path) -> tuple:
    return tuple(int(x) if x.isdigit() else 0 for x in re.split(r"[.-]", path.parent.name))


@functools.lru_cache(maxsize=8)
def ncu_version(ncu: str) -> str:
    """``ncu --version``'s version line (e.g. ``Version 2025.3.1.0 (build ...)``), or "unknown"."""
    try:
        out = subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return next((ln for ln in lines if ln.lower().startswith("version")), lines[-1] if lines else "unknown")


# ------------------------------------------------------------------------------------------------ parsing
@dataclass
class KernelProfile:
    """One profiled kernel launch: ncu's ID, the kernel's demangled name, its launch shape and every collected
    metric by ncu name (numbers as float or int, text as str; ``units`` maps a metric to its unit)."""

    id: int
    name: str
    grid: tuple[int, ...]
    block: tuple[int, ...]
    metrics: dict[str, Any] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    rules: list[dict[str, Any]] = field(default_factory=list)

    @property
    def short_name(self) -> str:
        """The kernel's function name without return type, namespaces, template arguments or parameters."""
        return short_kernel_name(self.name)

    def value(self, metric: str) -> float | None:
        """``metric`` as a number, or None if ncu did not collect it (or it is not a number)."""
        v = self.metrics.get(metric)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    @property
    def duration_us(self) -> float | None:
        """The kernel's duration under ncu (µs): serialized, caches flushed; not the program's timing."""
        ns = self.value(DURATION)
        return None if ns is None else ns / 1e3

    def stalls(self, top: int = 3) -> list[tuple[str, float]]:
        """The ``top`` warp stall reasons with the most cycles per issued instruction, largest first. ``selected``
        (the cycle a warp issues: about 1 by definition) is not a stall and is left out."""
        found = []
        for name, v in self.metrics.items():
            m = _STALL.match(name)
            if m and m.group("reason") != "selected" and isinstance(v, (int, float)) and v > 0:
                found.append((m.group("reason"), float(v)))
        return sorted(found, key=lambda x: -x[1])[:top]

    def occupancy_limit(self) -> str | None:
        """What limits blocks per SM: the resources that allow the fewest, e.g. ``"registers, shared memory (1
        block/SM)"``; None when ncu did not report the limits."""
        limits = [(int(v), what) for name, what in _LIMITS.items()
                  if isinstance(v := self.metrics.get(name), (int, float)) and v > 0]
        if not limits:
            return None
        n = min(v for v, _ in limits)
        return f"{', '.join(what for v, what in limits if v == n)} ({n} block{'s' if n != 1 else ''}/SM)"

    def l1_elapsed_pct(self) -> float | None:
        """L1's throughput in % of peak over the kernel's elapsed time, as DRAM's and L2's are. ncu's L1 figure in
        its speed-of-light section (``l1tex__throughput...active``) is over the SMs' active cycles only, so a kernel
        of one block on one SM reads up to 154% there (torch's scan kernels on the H200). This is ncu's elapsed
        figure when collected, else the active one times the SMs' mean active fraction (``sm__cycles_active.avg``
        over ``sm__cycles_elapsed.avg``, or ``gpc__cycles_elapsed.avg`` in reports without it: the same clock),
        which is the same quantity; None without those counters."""
        direct = self.value(L1_ELAPSED_PCT)
        if direct is not None:
            return direct
        active, busy = self.value(L1_PCT), self.value(SM_ACTIVE_CYCLES)
        elapsed = self.value(SM_ELAPSED_CYCLES) or self.value(GPC_ELAPSED_CYCLES)
        if active is None or busy is None or not elapsed:
            return None
        return active * min(1.0, busy / elapsed)

    def bound(self) -> str:
        """What bounds the kernel by ncu's speed of light: the busiest of the SM and the memory units (DRAM, L2,
        L1, each in % of peak over the kernel's elapsed time; :meth:`l1_elapsed_pct`) at its % of peak, or
        "latency" when none reaches BUSY_PCT (then the stall reasons say why)."""
        sm = self.value(SM_PCT)
        mem = {"DRAM": self.value(DRAM_PCT), "L2": self.value(L2_PCT), "L1": self.l1_elapsed_pct()}
        mem = {k: v for k, v in mem.items() if v is not None}
        if sm is None and not mem:
            return "unknown (no speed-of-light metrics)"
        unit, pct = max(mem.items(), key=lambda kv: kv[1]) if mem else ("memory", -1.0)
        if sm is not None and sm >= pct:
            unit, pct = "SM", sm
        if pct < BUSY_PCT:
            return f"latency (busiest: {unit} {pct:.0f}% of peak)"
        return f"{'compute' if unit == 'SM' else 'memory'}: {unit} {pct:.0f}% of peak"

    def summary(self) -> dict[str, Any]:
        """The headline figures as a plain dict (what :meth:`ProfileResult.table` shows)."""
        return {"id": self.id, "kernel": self.short_name, "grid": list(self.grid), "block": list(self.block),
                "duration_us": self.duration_us, "sm_pct": self.value(SM_PCT), "dram_pct": self.value(DRAM_PCT),
                "l2_pct": self.value(L2_PCT), "l1_pct": self.value(L1_PCT), "l1_elapsed_pct": self.l1_elapsed_pct(),
                "achieved_occupancy_pct": self.value(OCCUPANCY_PCT),
                "registers": self.value("launch__registers_per_thread"),
                "dynamic_smem_bytes": self.value("launch__shared_mem_per_block_dynamic"),
                "dram_bytes": _sum_or_none(self.value(DRAM_READ), self.value(DRAM_WRITE)),
                "occupancy_limit": self.occupancy_limit(), "bound": self.bound(),
                "stalls": [[r, round(v, 3)] for r, v in self.stalls()]}

    def to_json(self) -> dict[str, Any]:
        """Everything, JSON-ready: the summary, every metric with its unit, ncu's rule messages."""
        return {"summary": self.summary(), "name": self.name, "metrics": self.metrics, "units": self.units,
                "rules": self.rules}


def _sum_or_none(*values: float | None) -> float | None:
    return None if any(v is None for v in values) else float(sum(values))


def short_kernel_name(name: str) -> str:
    """``void ns::kern<T<1, 2>>(P)`` -> ``kern``; a name that is not a C++ signature comes back unchanged."""
    text = name.replace("(anonymous namespace)", "{anonymous}")
    cut = min((i for i in (text.find("<"), text.find("(")) if i >= 0), default=len(text))  # ends the qualified name
    head = text[:cut].strip()
    head = head.split(" ")[-1] if " " in head else head
    return head.split("::")[-1] or name


def parse_number(text: str) -> Any:
    """An ncu CSV cell: ``"28,416"`` -> 28416, ``"63.90"`` -> 63.9, ``"(384, 1, 1)"`` -> (384, 1, 1), ``""`` ->
    None, anything else stays text."""
    t = text.strip()
    if not t:
        return None
    if t.startswith("(") and t.endswith(")"):
        parts = [parse_number(p) for p in t[1:-1].split(",")]
        return tuple(parts) if all(isinstance(p, int) for p in parts) else t
    plain = t.replace(",", "")
    if re.fullmatch(r"[-+]?\d+", plain):
        return int(plain)
    try:
        v = float(plain)
    except ValueError:
        return t
    return v if math.isfinite(v) or plain.lower() in ("nan", "inf", "-inf") else t


#: Units ncu prints scaled (unless --print-units base) -> (base unit, factor): times in ns, bytes, hertz.
_TIME = {"ns": 1.0, "nsecond": 1.0, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6, "s": 1e9, "second": 1e9}
_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}  # ncu's prefixes are decimal (118.864 Kbyte = 118,864)


def base_unit(unit: str) -> tuple[str, float]:
    """``(base unit, factor)`` of an ncu unit: ``"us"`` -> ``("ns", 1000.0)``, ``"Mbyte"`` -> ``("byte", 1e6)``,
    ``"Kbyte/block"`` -> ``("byte/block", 1000.0)``, ``"Ghz"`` -> ``("hz", 1e9)``; other units unchanged, factor 1."""
    if unit in _TIME:
        return "ns", _TIME[unit]
    m = re.fullmatch(r"([KMGT]?)(byte|hz)(/.+)?", unit, flags=re.IGNORECASE)
    if m and m.group(1).upper() in _PREFIX and (m.group(1) == "" or m.group(1).isupper()):
        return m.group(2).lower() + (m.group(3) or ""), _PREFIX[m.group(1).upper()]
    return unit, 1.0


def _csv_rows(text: str) -> list[list[str]]:
    """The CSV rows of ncu's output (lines ncu or the program printed before the table are skipped)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    return list(csv.reader(io.StringIO("\n".join(lines[start:]))))


def parse_raw_csv(text: str) -> list[KernelProfile]:
    """Parse ``ncu --csv --page raw`` output (a header row, a units row, one row per kernel) into kernels, every
    value in base units (ns, byte, hz: :func:`base_unit`)."""
    rows = _csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    missing = [c for c in ("ID", "Kernel Name") if c not in header]
    if missing:
        raise ProfileError(f"ncu's raw CSV has no {missing} column(s) (its header starts {header[:6]}): this ncu's "
                           "layout is not one tunelab reads; open the report in Nsight Compute, and report the "
                           "layout with `ncu --version`")
    col = {name: i for i, name in enumerate(header)}
    units: dict[str, str] = {}
    kernels = []
    for row in rows[1:]:
        if len(row) != len(header):
            continue
        if not row[col["ID"]].strip():  # the units row
            units = {h: row[i] for i, h in enumerate(header) if h not in _ID_COLUMNS and row[i]}
            continue
        metrics = {h: parse_number(row[i]) for i, h in enumerate(header) if h not in _ID_COLUMNS}
        grid = parse_number(row[col["Grid Size"]]) if "Grid Size" in col else None
        block = parse_number(row[col["Block Size"]]) if "Block Size" in col else None
        kernels.append(KernelProfile(id=int(parse_number(row[col["ID"]])), name=row[col["Kernel Name"]],
                                     grid=grid if isinstance(grid, tuple) else (),
                                     block=block if isinstance(block, tuple) else (), metrics=metrics))
    scale = {m: base_unit(u) for m, u in units.items()}
    for k in kernels:  # values in base units (ns, byte, hz), whatever ncu's printing scaled them to
        k.units = {m: scale[m][0] for m in units if m in k.metrics}
        for m, (_, factor) in scale.items():
            v = k.metrics.get(m)
            if factor != 1.0 and isinstance(v, (int, float)) and not isinstance(v, bool):
                k.metrics[m] = v * factor
    return kernels


def parse_rules_csv(text: str) -> dict[int, list[dict[str, Any]]]:
    """ncu's rule messages (``--csv --page details``: rows with a rule name) by kernel ID: the rule, its type
    (OPT, WRN, ...), its text and, where ncu estimates one, the speedup it predicts."""
    rows = _csv_rows(text)
    if not rows:
        return {}
    col = {name: i for i, name in enumerate(rows[0])}
    if "Rule Name" not in col:
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    for row in rows[1:]:
        if len(row) != len(rows[0]) or not row[col["Rule Name"]].strip():
            continue
        rule = {"section": row[col["Section Name"]], "rule": row[col["Rule Name"]],
                "type": row[col["Rule Type"]], "text": row[col["Rule Description"]]}
        if "Estimated Speedup" in col and row[col["Estimated Speedup"]].strip():
            rule["estimated_speedup_pct"] = parse_number(row[col["Estimated Speedup"]])
            rule["speedup_type"] = row[col.get("Estimated Speedup Type", col["Estimated Speedup"])]
        out.setdefault(int(parse_number(row[col["ID"]])), []).append(rule)
    return out


# ------------------------------------------------------------------------------------------------ running ncu
@dataclass
class ProfileResult:
    """What :func:`profile` found: the kernels in launch order, the command, ncu's version, the report file (when
    one was kept) and the asked-for metrics ncu did not collect."""

    command: list[str]
    ncu: str
    ncu_version: str
    kernels: list[KernelProfile]
    report: str | None = None
    missing_metrics: list[str] = field(default_factory=list)
    program_output: str = ""

    def find(self, pattern: str) -> list[KernelProfile]:
        """The kernels whose demangled name matches the regular expression ``pattern`` (``re.search``)."""
        rx = re.compile(pattern)
        return [k for k in self.kernels if rx.search(k.name)]

    def table(self, *, width: int | None = None) -> str:
        """A text table, one row per kernel: time under ncu, SM / DRAM / L2 % of peak, achieved occupancy,
        registers, the occupancy limiter, what bounds it and the top stall reasons."""
        from rich.console import Console

        t = _kernel_table(f"ncu: {len(self.kernels)} kernel(s) of {' '.join(self.command)[:80]}", "#")
        for k in self.kernels:
            t.add_row(str(k.id), *_kernel_cells(k))
        console = Console(width=width or 200, record=True, file=io.StringIO())
        console.print(t)
        if self.missing_metrics:
            console.print(f"not collected on this GPU / ncu: {', '.join(self.missing_metrics)}", markup=False)
        if self.report:
            console.print(f"report: {self.report} (open it in Nsight Compute: ncu-ui {self.report})", markup=False)
        return console.export_text()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the command, ncu, the report, the missing metrics and every kernel (:meth:`KernelProfile.to_json`)."""
        return {"command": self.command, "ncu": self.ncu, "ncu_version": self.ncu_version, "report": self.report,
                "missing_metrics": self.missing_metrics, "kernels": [k.to_json() for k in self.kernels]}


def _kernel_table(title: str, first: str):
    """The kernel table's columns, after a first column ``first`` (the kernel's ID, or the arm)."""
    from rich.table import Table

    t = Table(title=title)
    for name in (first, "kernel", "grid x block", "µs", "SM %", "DRAM %", "L2 %", "occ. %", "regs", "limit", "bound",
                 "top stalls (cycles/instr)"):
        t.add_column(name, overflow="fold")
    return t


def _kernel_cells(k: KernelProfile) -> list[str]:
    """One kernel's cells of the kernel table, after its first column."""
    s = k.summary()
    return [k.short_name, f"{_dims(k.grid)} x {_dims(k.block)}", _fmt(s["duration_us"], 1), _fmt(s["sm_pct"], 0),
            _fmt(s["dram_pct"], 0), _fmt(s["l2_pct"], 0), _fmt(s["achieved_occupancy_pct"], 0),
            _fmt(s["registers"], 0), s["occupancy_limit"] or "-", s["bound"],
            ", ".join(f"{r} {v:.1f}" for r, v in s["stalls"]) or "-"]


def _dims(d: tuple) -> str:
    return "x".join(str(x) for x in d) if d else "?"


def _fmt(v: float | None, digits: int) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def ncu_command(command: Sequence[str], report: str, *, ncu: str, metrics: Iterable[str] = (), kernel: str | None = None,
                launch_skip: int = 0, launch_count: int | None = None, profile_from_start: bool = True,
                clock_control: str = "none", cache_control: str = "all",
                sections: Iterable[str] = SECTIONS) -> list[str]:
    """The ncu command line that profiles ``command`` into the report ``report`` (a path without ``.ncu-rep``).

    ``kernel``: a regular expression on the kernel's function name (ncu ``-k regex:``, matched against the name
    without namespaces, template arguments or parameters); ``launch_skip`` /
    ``launch_count``: of the matching launches, skip the first ones / profile at most this many;
    ``profile_from_start=False``: profile only between ``cudaProfilerStart`` and ``cudaProfilerStop``
    (``torch.cuda.profiler.start()`` / ``stop()``)."""
    if clock_control not in CLOCK_CONTROLS:
        raise ProfileError(f"clock_control={clock_control!r}; accepted: {CLOCK_CONTROLS}")
    if cache_control not in CACHE_CONTROLS:
        raise ProfileError(f"cache_control={cache_control!r}; accepted: {CACHE_CONTROLS}")
    if int(launch_skip) < 0:
        raise ProfileError(f"launch_skip={launch_skip} must be >= 0 (launches to skip before profiling)")
    if launch_count is not None and int(launch_count) < 1:
        raise ProfileError(f"launch_count={launch_count} must be >= 1 (launches to profile), or None for all")
    if not command:
        raise ProfileError("no command to profile; give the program and its arguments, e.g. ['python', 'x.py']")
    cmd = [ncu, "--clock-control", clock_control, "--cache-control", cache_control, "-f", "-o", report]
    for s in sections:
        cmd += ["--section", s]
    metrics = [m for m in dict.fromkeys(metrics) if m]
    if metrics:
        cmd += ["--metrics", ",".join(metrics)]
    if kernel:
        cmd += ["-k", f"regex:{kernel}"]
    if launch_skip:
        cmd += ["--launch-skip", str(int(launch_skip))]
    if launch_count is not None:
        cmd += ["--launch-count", str(int(launch_count))]
    if not profile_from_start:
        cmd += ["--profile-from-start", "off"]
    return cmd + [str(c) for c in command]


#: ncu messages that mean it could not read the counters, and what to do about each.
_COUNTER_ERRORS = (
    ("ERR_NVGPUCTRPERM", "this user may not read the GPU's performance counters: run as root, or set the driver "
                         "option NVreg_RestrictProfilingToAdminUsers=0 (see NVIDIA's ERR_NVGPUCTRPERM page)"),
    ("LibraryNotLoaded", "ncu could not load its profiling library on this machine (seen in sandboxed runtimes "
                         "such as gVisor); profile on a machine whose runtime exposes the GPU's counters"),
    ("Profiling is not supported on this device", "this GPU or driver does not support ncu's counters"),
)


def profile(command: Sequence[str], *, metrics: Iterable[str] = (), kernel: str | None = None, launch_skip: int = 0,
            launch_count: int | None = None, profile_from_start: bool = True, clock_control: str = "none",
            cache_control: str = "all", report: str | os.PathLike | None = None, timeout: float | None = None,
            env: Mapping[str, str] | None = None, ncu: str | os.PathLike | None = None,
            echo: bool = False) -> ProfileResult:
    """Run ``command`` (a program and its arguments) under Nsight Compute and return its kernels' counters.

    Args:
        command: the program to run, e.g. ``[sys.executable, "script.py"]``.
        metrics: ncu metric names to collect besides :data:`SECTIONS` and :data:`DEFAULT_METRICS` (a name with a
            rollup such as ``dram__bytes.sum``, a base name such as ``dram__bytes``, or ncu's ``regex:`` /
            ``group:`` / ``breakdown:`` forms); a plain name of which ncu collected nothing raises ProfileError (ncu
            itself drops an unknown name without a word).
        kernel: regular expression on the kernel's function name, as :attr:`KernelProfile.short_name` gives it
            (ncu matches its function name, without namespaces, template arguments or parameters); only matching
            kernels are profiled. (:meth:`ProfileResult.find` searches the whole demangled name.)
        launch_skip, launch_count: skip the first matching launches; profile at most this many.
        profile_from_start: False: profile only inside ``cudaProfilerStart`` / ``Stop`` ranges.
        clock_control: ``"none"`` (default: clocks as the program runs them) or ``"base"`` (ncu's lock).
        cache_control: ``"all"`` (flush caches before each replayed kernel, default) or ``"none"``.
        report: keep ncu's report here (``.ncu-rep`` added if missing; an older one there is replaced); default: a
            temporary file, deleted.
        timeout: seconds before ncu and the program are stopped (ProfileError).
        env: variables to set for ncu and the program, on top of this process's environment.
        ncu: path of ncu (default: :func:`find_ncu`).
        echo: copy ncu's and the program's output to stderr as it comes (the command line does), else keep it in
            :attr:`ProfileResult.program_output` only.

    Raises:
        ProfileError: ncu missing or unable to read counters, the program failing (its exit status and the end of
            its output are in the message), a timeout, no kernel profiled, or asked-for metrics not collected.
    """
    exe = find_ncu(ncu)
    asked = [m.strip() for m in dict.fromkeys(metrics) if m and m.strip()]
    with tempfile.TemporaryDirectory(prefix="tunelab-ncu-") as tmp:
        if report is None:
            base = str(Path(tmp) / "profile")
        else:
            base = _report_base(report)
            Path(base).parent.mkdir(parents=True, exist_ok=True)
        rep = base + ".ncu-rep"
        cmd = ncu_command(command, base, ncu=exe, metrics=[*DEFAULT_METRICS, *asked], kernel=kernel,
                          launch_skip=launch_skip, launch_count=launch_count, profile_from_start=profile_from_start,
                          clock_control=clock_control, cache_control=cache_control)
        Path(rep).unlink(missing_ok=True)  # a report left by an earlier run must not pass for this run's
        status, output = _run(cmd, timeout=timeout, env={**os.environ, **(env or {})}, echo=echo)
        for marker, advice in _COUNTER_ERRORS:
            if marker in output:
                raise ProfileError(f"ncu could not read the counters ({marker}): {advice}")
        if status != 0:
            who = "the profiled program" if "returned an error code" in output else "ncu"
            raise ProfileError(f"{who} exited with status {status} ({shlex.join(cmd)}); the end of the "
                               f"output:\n{_tail(output)}")
        if not Path(rep).is_file() or "No kernels were profiled" in output:
            raise ProfileError("ncu profiled no kernel: check the kernel filter "
                               f"({kernel!r}: a regular expression on the function name), launch_skip / "
                               "launch_count and, with profile_from_start=False, that the program calls "
                               f"cudaProfilerStart; ncu's output:\n{_tail(output)}")
        kernels = parse_raw_csv(_import(exe, rep, "raw"))
        rules = parse_rules_csv(_import(exe, rep, "details"))
        for k in kernels:
            k.rules = rules.get(k.id, [])
        if not kernels:
            raise ProfileError(f"ncu's report {rep} holds no kernel its CSV export could read; open it in Nsight "
                               f"Compute (ncu-ui) to see what it holds; ncu's output:\n{_tail(output)}")
        collected = set().union(*(k.metrics for k in kernels))
        missing = [m for m in dict.fromkeys([*DEFAULT_METRICS, *asked]) if not _collected(m, collected)]
        unknown = [m for m in asked if m in missing]
        if unknown:
            raise ProfileError(f"ncu did not collect {unknown}: not metrics of this GPU or ncu version (list the "
                               f"valid names with `{exe} --query-metrics`)")
    return ProfileResult(command=[str(c) for c in command], ncu=exe, ncu_version=ncu_version(exe), kernels=kernels,
                         report=None if report is None else rep, missing_metrics=missing, program_output=output)


def write_profile(path: str | os.PathLike, result: "ProfileResult | TunedProfile", **extra: Any) -> dict[str, Any]:
    """Write ``result.to_json()`` to ``path`` with the environment fingerprint (and ``extra`` keys) first; returns
    the document written (what ``tunelab profile --out`` and ``tunelab tune --profile`` save)."""
    from tunelab.env import fingerprint
    from tunelab.jsonfile import write_json

    doc = {"environment": fingerprint(), **extra, **result.to_json()}
    write_json(path, doc)
    return doc


def _report_base(report: str | os.PathLike) -> str:
    """A report path without its ``.ncu-rep`` suffix (what ncu's ``-o`` takes)."""
    text = os.fspath(report)
    return text[: -len(".ncu-rep")] if text.endswith(".ncu-rep") else text


def _collected(metric: str, columns: set[str]) -> bool:
    """Whether ncu collected ``metric``: its column, or, for a base name, a column of one of its rollups
    (``dram__bytes`` -> ``dram__bytes.sum``, ...). ncu's ``regex:``, ``group:`` and ``breakdown:`` forms name no
    column of their own and count as collected."""
    if re.match(r"^(regex|group|breakdown):", metric):
        return True
    return metric in columns or any(c.startswith(metric + ".") for c in columns)


def _run(cmd: list[str], *, timeout: float | None, env: Mapping[str, str], echo: bool) -> tuple[int, str]:
    """Run ncu in a session of its own; returns (exit status, its output and the program's, interleaved). On a
    timeout the whole session (ncu and the program it started) is killed."""
    import signal
    import threading

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            env=dict(env), start_new_session=True)
    chunks: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            chunks.append(line)
            if echo:
                sys.stderr.write(line)
                sys.stderr.flush()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        status = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
        reader.join(5)
        raise ProfileError(f"ncu did not finish in {timeout} s and was stopped with the program it ran "
                           f"({shlex.join(cmd)}); the end of the output:\n{_tail(''.join(chunks))}") from None
    reader.join()
    return status, "".join(chunks)


def _import(ncu: str, report: str, page: str) -> str:
    cmd = [ncu, "-i", report, "--csv", "--print-units", "base", "--page", page]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired:
        raise ProfileError(f"`{shlex.join(cmd)}` did not finish in 600 s") from None
    if run.returncode != 0:
        raise ProfileError(f"`{shlex.join(cmd)}` failed (status {run.returncode}):\n{_tail(run.stdout + run.stderr)}")
    return run.stdout


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# ------------------------------------------------------------------------------------------------ ops
def profile_op(op: str, *, shape: Sequence[int], dtype: str = "fp16", causal: bool = False, metric: str = "ip",
               config: str | None = None, warmup: int = 3, device: int = 0, **kwargs) -> ProfileResult:
    """Profile one call of a tunelab op on random inputs (``python -m tunelab.profile_target``: the warm-up calls,
    which compile and record, are not profiled).

    Args:
        op: ``"similarity"`` (shape nq,n,d,k), ``"attention"`` (B,H,S,D) or ``"gram"`` (n,dim).
        dtype: fp16, bf16, fp32 (gram also complex64).
        causal: attention's causal mask. metric: the search's metric (ip, cosine, l2).
        config: a config string (``"BLOCK_N=128,..."``) to profile instead of the op's default or tuned config.
        warmup: unprofiled calls before the profiled one. device: the CUDA device.
        **kwargs: passed to :func:`profile` (metrics, kernel, report, timeout, clock_control, ...; not
            profile_from_start: the profiled range is the one call).
    """
    from tunelab.profile_target import target_command

    _one_call_only("profile_op", kwargs)
    cmd = target_command(op, shape=shape, dtype=dtype, causal=causal, metric=metric, config=config, warmup=warmup,
                         device=device)
    return profile(cmd, profile_from_start=False, **kwargs)


# ------------------------------------------------------------------------------------------ tuned configs
def profile_config(family: Any, problem: Mapping[str, Any], config: Mapping[str, Any] | None = None, *,
                   baseline: str | None = None, warmup: int = 3, device: int = 0, seed: int = 0,
                   **kwargs) -> ProfileResult:
    """Profile one call of a tuning family's ``config`` (or of its ``baseline``, e.g. ``"torch_topk"``) on the
    family's own inputs, launched as the tuner timed it (its timing closure), after ``warmup`` unprofiled calls.

    Args:
        family: a family name (``"attention"``, ``"similarity"``, ``"gram"``) or a family object whose
            ``worker_ref()`` names it as ``"module:attr"`` (the profiled program rebuilds it from that).
        problem: the family's problem dict (``TuneResult.data["problem"]``).
        config: a config of the family's space (a dict); it must pass the space's constraints and the family's
            static gates.
        baseline: instead of a config, one of the family's baselines.
        warmup: unprofiled calls before the profiled one (the first compiles and fills caches).
        device: the CUDA device.
        seed: the inputs' seed (the tuner's default is 0).
        **kwargs: passed to :func:`profile` (metrics, kernel, report, timeout, clock_control, ...).
    """
    from tunelab.profile_target import family_command

    _one_call_only("profile_config", kwargs)
    cmd = family_command(family, problem, config=config, baseline=baseline, warmup=warmup, device=device, seed=seed)
    return profile(cmd, profile_from_start=False, **kwargs)


def _one_call_only(who: str, kwargs: Mapping[str, Any]) -> None:
    if "profile_from_start" in kwargs:
        raise ProfileError(f"{who} profiles one call between cudaProfilerStart and Stop; profile_from_start cannot "
                           "be set (use profile() with your own program for that)")


#: What :func:`profile_tuned` profiles by default: the tuned winner, the family's default config and the
#: strongest baseline of the confirmation.
TUNED_ARMS: tuple[str, ...] = ("best", "default", "baseline")


@dataclass
class TunedArm:
    """One arm :func:`profile_tuned` profiles: its label, what it is, its config (None for a baseline), its baseline
    name (None for a config) and the tuner's confirmed median for it (µs; None when confirmation did not run)."""

    label: str
    described: str
    config: dict | None
    baseline: str | None
    timer_us: float | None


@dataclass
class TunedProfile:
    """:func:`profile_tuned`'s answer: one :class:`ProfileResult` per arm label, in order (``arms``), what each arm
    is with the time the tuner's timer measured for it (``specs``, :class:`TunedArm`), and notes (arms left out or
    merged, another GPU's timings)."""

    family: str
    problem: dict
    arms: dict[str, ProfileResult]
    specs: dict[str, TunedArm]
    notes: list[str] = field(default_factory=list)

    def total_us(self, arm: str) -> float | None:
        """The arm's kernels' durations under ncu, summed (µs)."""
        times = [k.duration_us for k in self.arms[arm].kernels]
        return None if not times or any(t is None for t in times) else float(sum(times))

    def table(self, *, width: int | None = None) -> str:
        """One row per kernel of each arm (as :meth:`ProfileResult.table`), then a line per arm with its kernels'
        total under ncu and the timer's median, and the notes."""
        from rich.console import Console

        t = _kernel_table(f"ncu: {self.family} {self.problem}", "arm")
        for arm, result in self.arms.items():
            for i, k in enumerate(result.kernels):
                t.add_row(arm if i == 0 else "", *_kernel_cells(k), end_section=i == len(result.kernels) - 1)
        console = Console(width=width or 200, record=True, file=io.StringIO())
        console.print(t)
        for arm in self.arms:
            timer = self.specs[arm].timer_us
            console.print(f"{arm}: {self.specs[arm].described}; {len(self.arms[arm].kernels)} kernel(s), "
                          f"{_fmt(self.total_us(arm), 1)} µs under ncu"
                          + (f", {timer:.1f} µs by the tuner's timer (confirmation median)" if timer else ""),
                          markup=False)
        for note in self.notes:
            console.print(note, markup=False)
        console.print("ncu flushes the caches clean and serializes kernels: its times are not the timer's "
                      "(tunelab.profile's docstring says why)")
        return console.export_text()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready: the problem, the notes, and per arm what it is, the timer's median, ncu's total and
        :meth:`ProfileResult.to_json`."""
        return {"family": self.family, "problem": self.problem, "notes": self.notes,
                "arms": {arm: {"described": self.specs[arm].described, "timer_us": self.specs[arm].timer_us,
                               "ncu_total_us": self.total_us(arm), **r.to_json()} for arm, r in self.arms.items()}}


def _as_tune_result(result: Any):
    """A TuneResult from a TuneResult, its data dict or the path of its results JSON."""
    from tunelab.tuning.results import TuneResult, load_results

    if isinstance(result, TuneResult):
        return result
    if isinstance(result, (str, os.PathLike)):
        return TuneResult(load_results(result))
    if not isinstance(result, Mapping):
        raise ProfileError(f"a tuning result is a TuneResult, its data dict or a results JSON path; got "
                           f"{type(result).__name__}")
    missing = [key for key in ("family", "problem") if key not in result]
    if missing:
        raise ProfileError(f"this tuning result has no {missing}: pass what tunelab.tune returned or its results "
                           "JSON")
    return TuneResult(dict(result))


def tuned_arms(result: Any, which: Sequence[str] = TUNED_ARMS, *, family: Any = None) -> tuple[list[TunedArm],
                                                                                             list[str]]:
    """The arms :func:`profile_tuned` profiles for a tuning result, and notes (an arm left out or merged, and why).

    ``which``: ``"best"`` (the confirmed winner, else the search's best), ``"default"`` (the family's default
    config), ``"baseline"`` (the confirmation's fastest baseline, else the family's first) and ``"baseline:NAME"``;
    a config already listed is profiled once. ``family``: the family object, when the result's family name is not
    one tunelab can look up."""
    from tunelab.ops.config import to_string

    r = _as_tune_result(result)
    unknown = [w for w in which if w not in ("best", "default", "baseline") and not w.startswith("baseline:")]
    if unknown or not which:
        raise ProfileError(f"arm(s) {unknown or list(which)} not known; accepted: best, default, baseline, "
                           "baseline:NAME (e.g. --arms best,baseline:torch_topk)")
    fam = _result_family(r, family)
    prob = fam.problem_from_dict(r.data["problem"])
    space = fam.space(prob)
    conf = r.confirmation
    by_label = {a.label: a for a in conf.arms} if conf is not None else {}

    def timer(label: str | None) -> float | None:
        a = by_label.get(label) if label else None
        m = a.summary.get("median") if a is not None else None
        return float(m) if m is not None else None

    arms: list[TunedArm] = []
    notes: list[str] = []
    seen: dict[str, str] = {}
    for w in which:
        if w == "best":
            cfg = r.best_config
            if cfg is None:
                notes.append("best: the study has no measured config")
                continue
            label = conf.best if conf is not None and conf.best else None
            arm = TunedArm("best", f"the tuned winner ({label or 'the search best'}, {to_string(cfg, list(cfg))})",
                           cfg, None, timer(label))
        elif w == "default":
            cfg = r.data.get("default_config")
            if cfg is None:
                notes.append("default: the result records no default config")
                continue
            label = next((a.label for a in by_label.values() if a.is_default), None)
            arm = TunedArm("default", f"the default config ({to_string(cfg, list(cfg))})", cfg, None, timer(label))
        else:
            name = w.partition(":")[2] or (conf.best_baseline if conf is not None else None)
            if not name:
                names = list((fam.baselines(prob) or {}).keys())
                if not names:
                    notes.append(f"baseline: {fam.name} has no baseline")
                    continue
                name = names[0]
            arm = TunedArm(f"baseline:{name}", f"the baseline {name}", None, name, timer(name))
        key = space.key(space.validate(arm.config)) if arm.config is not None else arm.label
        if key in seen:
            notes.append(f"{arm.label}: the same config as {seen[key]}, profiled once")
            continue
        seen[key] = arm.label
        arms.append(arm)
    if not arms:
        raise ProfileError(f"nothing to profile in this result for {list(which)}: " + "; ".join(notes))
    return arms, notes


def _result_family(result: Any, family: Any = None) -> Any:
    """The family object of a tuning result: ``family`` when given, else looked up by the result's family name."""
    from tunelab.tuning.family import get_family

    if family is not None:
        return family
    try:
        return get_family(result.data["family"])
    except ConfigError as exc:
        raise ConfigError(f"{exc}; for a family of your own, pass it: profile_tuned(result, family=...)") from None


def _report_path(prefix: str | os.PathLike, label: str) -> str:
    """``PREFIX_LABEL`` for one arm's report: ``.ncu-rep`` dropped from the prefix, the label made a file name."""
    text = _report_base(prefix)
    if "%" in text:
        raise ProfileError(f"report prefix {text!r} contains '%', which ncu expands in report names; choose "
                           "another path")
    return f"{text}_{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}"


def _device_note(result: Any, device: int) -> str | None:
    """A note when the result was tuned on another GPU than ``device`` (its timer medians are that GPU's)."""
    tuned = result.data.get("device") or {}
    if not (tuned.get("uuid") or tuned.get("name")):
        return None
    try:
        from tunelab import _core

        here = _core.device_info(device)
    except Exception:  # noqa: BLE001 - no driver here: profile() will say so
        return None
    same = (tuned.get("uuid") == here.get("uuid")) if tuned.get("uuid") else tuned.get("name") == here.get("name")
    if same:
        return None
    return (f"the result was tuned on {tuned.get('name', 'another GPU')} ({tuned.get('uuid', 'no UUID')}), this is "
            f"{here.get('name')} ({here.get('uuid')}): the timer's medians are that GPU's")


def profile_tuned(result: Any, which: Sequence[str] = TUNED_ARMS, *, family: Any = None, warmup: int = 3,
                  device: int | None = None, seed: int | None = None, progress: bool = True,
                  **kwargs) -> TunedProfile:
    """Profile a tuning result's winner next to the default config and the strongest baseline, on the problem it
    was tuned for: why the winner is faster, in hardware counters.

    Args:
        result: a :class:`~tunelab.tuning.results.TuneResult`, its ``data`` dict, or the path of its results JSON
            (measured on a GPU: a replayed result has no winner of this machine).
        which: the arms (:func:`tuned_arms`): ``best``, ``default``, ``baseline`` and ``baseline:NAME``.
        family: the family object, when the result's family is not one of tunelab's own (see
            :func:`profile_config`).
        warmup: as in :func:`profile_config`.
        device, seed: the GPU and the inputs' seed; default the ones the tuner used (the result's backend).
        progress: print a line to stderr as each arm starts.
        **kwargs: passed to :func:`profile` for each arm (metrics, kernel, timeout, ...); ``report`` is a path
            prefix here, one report per arm (``PREFIX_best.ncu-rep``, ``PREFIX_baseline_torch_topk.ncu-rep``, ...).

    Every arm is checked (its config against the space, its baseline against the family's) before ncu starts.
    Returns a :class:`TunedProfile` (``.table()``, ``.to_json()``, ``.arms[label]``).
    """
    from tunelab.profile_target import family_command

    _one_call_only("profile_tuned", kwargs)
    r = _as_tune_result(result)
    if r.data.get("mode") not in (None, "gpu"):
        raise ProfileError(f"this result was made in {r.data.get('mode')!r} mode (not measured on a GPU): its "
                           "configs can still be profiled with profile_config(), but there is no tuned winner to check")
    backend = r.data.get("backend") or {}
    device = int(backend.get("device", 0) if device is None else device)
    seed = int(backend.get("input_seed", 0) if seed is None else seed)
    problem = dict(r.data["problem"])
    fam = _result_family(r, family)
    arms, notes = tuned_arms(r, which, family=fam)
    commands = {a.label: family_command(fam, problem, config=a.config, baseline=a.baseline, warmup=warmup,
                                        device=device, seed=seed) for a in arms}
    note = _device_note(r, device)
    if note:
        notes.append(note)
    report = kwargs.pop("report", None)
    profiles: dict[str, ProfileResult] = {}
    for i, a in enumerate(arms, 1):
        if progress:
            print(f"[{i}/{len(arms)}] profiling {a.label}: {a.described}", file=sys.stderr, flush=True)
        rep = None if report is None else _report_path(report, a.label)
        profiles[a.label] = profile(commands[a.label], profile_from_start=False, report=rep, **kwargs)
    return TunedProfile(r.data["family"], problem, profiles, {a.label: a for a in arms}, notes)
