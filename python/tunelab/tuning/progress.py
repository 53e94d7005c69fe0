"""Terminal output of a study: a rich progress bar while searching, and the final tables."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tunelab.report import arm_label


class SearchProgress:
    """Progress bar: evaluations done / budget, best median so far, rejections, duplicates answered."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(TextColumn("[bold]tuning"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("best {task.fields[best]}"), TextColumn("rejected {task.fields[rej]}"),
                                 TextColumn("dup {task.fields[dup]}"), TimeElapsedColumn(),
                                 console=self.console, transient=False)
        self.task = None

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        self.progress.__exit__(*exc)
        return False

    def start(self, driver) -> None:
        """Create the bar from the driver's budget and current state (a resumed study starts part-way)."""
        best = driver.best
        self.task = self.progress.add_task("tune", total=driver.opts.trials, completed=driver.evaluated,
                                           best=_fmt(best.value if best else None), rej=driver.gates.rejected,
                                           dup=driver.duplicates)

    def update(self, info: dict) -> None:
        """Called after every told trial."""
        if self.task is None:
            return
        self.progress.update(self.task, completed=min(info["evaluated"], info["trials"]), best=_fmt(info["best"]),
                             rej=info["rejected"], dup=info["duplicates"])


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f} us"


def gates_table(gates: dict) -> Table:
    """Rejections by reason code, in gate order."""
    t = Table(title="gates: rejections by reason", min_width=40)
    t.add_column("reason")
    t.add_column("count", justify="right")
    for code, n in gates.get("by_reason", {}).items():
        t.add_row(code, str(n))
    t.add_row("[bold]measured[/bold]", str(gates.get("passed", 0)))
    return t


def confirmation_table(conf: dict) -> Table:
    """Confirmed arms: median, 95% CI, speedup of the best over each arm."""
    t = Table(title=f"confirmation ({conf['rounds']} interleaved rounds)")
    for col in ("arm", "kind", "median us", "95% CI", "best is faster by"):
        t.add_column(col, justify="right" if col not in ("arm", "kind") else "left")
    speedups = conf.get("speedups", {})
    for a in conf["arms"]:
        ci = a["ci"]
        label = arm_label(a)
        if a["label"] == conf.get("best"):
            label = f"[bold green]{label} *[/bold green]"
        if a["label"] in speedups:
            s = speedups[a["label"]]
            sp = f"{s['estimate']:.3f}x [{s['low']:.3f}, {s['high']:.3f}]"
        elif a.get("is_default") and conf.get("speedup_vs_default") and a["label"] != conf.get("best"):
            s = conf["speedup_vs_default"]
            sp = f"{s['estimate']:.3f}x [{s['low']:.3f}, {s['high']:.3f}]"
        else:
            sp = ""
        t.add_row(label, a["kind"], f"{ci['estimate']:.2f}", f"[{ci['low']:.2f}, {ci['high']:.2f}]", sp)
    return t


def timing_table(timing: dict) -> Table:
    """Wall-clock split."""
    t = Table(title="wall clock", min_width=30)
    t.add_column("phase")
    t.add_column("seconds", justify="right")
    for k in ("total_s", "search_s", "compile_wait_s", "compile_cpu_s", "measure_s", "confirm_s", "sampler_s",
              "overhead_s"):
        if k in timing:
            t.add_row(k[:-2].replace("_", " "), f"{timing[k]:.2f}")
    return t


def top_trials_table(trials: list[dict], n: int = 5) -> Table:
    """The fastest measured configs of the search."""
    ok = sorted((t for t in trials if t.get("status") == "ok" and t.get("value") is not None),
                key=lambda t: t["value"])[:n]
    t = Table(title=f"top {len(ok)} of the search")
    t.add_column("trial", justify="right")
    t.add_column("median us", justify="right")
    t.add_column("config")
    for r in ok:
        t.add_row(str(r["number"]), f"{r['value']:.2f}", ", ".join(f"{k}={v}" for k, v in r["config"].items()))
    return t


def print_report(data: dict, console: Console | None = None) -> None:
    """Everything a user wants after a run: top configs, gates, confirmation, verdict, wall clock."""
    console = console or Console()
    console.print(f"[bold]{data['family']}[/bold] {data['problem_key']} on {data.get('device', {}).get('name', '?')}"
                  f" ({data['mode']}); study {data['study']['name']}")
    console.print(f"stop reason: {data['stop_reason']}; evaluations: {data.get('evaluations')}; "
                  f"duplicates answered from the study: {data.get('duplicates')}")
    console.print(top_trials_table(data["trials"]))
    console.print(gates_table(data["gates"]))
    conf = data.get("confirmation")
    if conf and conf.get("arms"):
        console.print(confirmation_table(conf))
        for note in conf.get("notes", []):
            console.print(f"note: {note}")
    v = data.get("verdict")
    if v:
        color = "green" if v["win"] else "yellow"
        console.print(f"[bold {color}]verdict: {v['text']}[/bold {color}]")
    else:
        console.print("[yellow]verdict: not confirmed[/yellow]")
    console.print(timing_table(data["timing"]))
    if data.get("store", {}).get("written"):
        console.print(f"stored in {data['store']['path']}")
    if data.get("path"):
        console.print(f"results: {data['path']}")
