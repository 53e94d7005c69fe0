"""Plots of tuning results (matplotlib): optimization history and confirmation CIs.

Every function takes a :class:`~tunelab.tuning.results.TuneResult`, a results dict or a results JSON path,
draws on ``ax`` (a new figure when None) and returns the axes, so it works in notebooks and scripts alike.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping


def arm_label(arm: Mapping[str, Any]) -> str:
    """A confirmation arm's display name: its label, marked ``(default)`` when it is the family's default config
    under another label (tables and plots)."""
    return arm["label"] + (" (default)" if arm.get("is_default") and arm["label"] != "default" else "")


def _data(result: Any) -> dict:
    if isinstance(result, (str, Path)):
        from tunelab.tuning.results import load_results

        return load_results(result)
    if isinstance(result, dict):
        return result
    return result.data


def _axes(ax, figsize=(7, 4)):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=figsize)
    return ax


def plot_history(result: Any, ax=None):
    """Median latency of every measured trial (dots, seeds marked) and the best so far (step line)."""
    from tunelab.tuning.seeding import SEED_SOURCES

    d = _data(result)
    ax = _axes(ax)
    xs, ys, seed_x, seed_y = [], [], [], []
    rej_x = []
    for t in d["trials"]:
        if t.get("status") == "ok" and t.get("value") is not None:
            (seed_x if t.get("source") in SEED_SOURCES else xs).append(t["number"])
            (seed_y if t.get("source") in SEED_SOURCES else ys).append(t["value"])
        elif t.get("status") in ("rejected", "failed") and t.get("evaluated"):
            rej_x.append(t["number"])
    measured = sorted(zip(xs + seed_x, ys + seed_y))
    best_x, best_y, best = [], [], float("inf")
    for x, y in measured:
        best = min(best, y)
        best_x.append(x)
        best_y.append(best)
    ax.scatter(seed_x, seed_y, s=14, marker="s", color="tab:gray", label="seed (default config, Latin hypercube)",
               zorder=2)
    ax.scatter(xs, ys, s=14, color="tab:blue", label="sampler", zorder=2)
    if best_x:
        ax.step(best_x, best_y, where="post", color="tab:red", label="best so far", zorder=3)
    if rej_x and measured:
        y0 = min(y for _, y in measured)
        ax.scatter(rej_x, [y0] * len(rej_x), marker="x", s=12, color="tab:orange",
                   label="rejected/failed after compiling", zorder=1)
    base = _best_baseline_median(d)
    if base is not None:
        ax.axhline(base[1], color="k", ls="--", lw=1, label=f"{base[0]} (confirmed median)")
    ax.set_xlabel("trial")
    ax.set_ylabel("median latency (µs)")
    ax.set_title(f"{d['family']} {d['problem_key']}: optimization history")
    if measured:
        ys_all = [y for _, y in measured]
        lo, hi = min(ys_all), sorted(ys_all)[int(0.9 * (len(ys_all) - 1))]
        if base is not None:
            hi = max(hi, base[1])
        ax.set_ylim(lo * 0.95, hi * 1.1)  # the slowest configs would squash the interesting part
    ax.legend(fontsize=8)
    return ax


def _best_baseline_median(d: dict):
    conf = d.get("confirmation")
    if not conf or not conf.get("best_baseline"):
        return None
    for a in conf["arms"]:
        if a["label"] == conf["best_baseline"]:
            return a["label"], a["ci"]["estimate"]
    return None


def plot_confirmation(result: Any, ax=None):
    """Confirmed median of every arm with its 95% bootstrap CI (horizontal error bars), best candidate marked."""
    d = _data(result)
    conf = d.get("confirmation")
    ax = _axes(ax, figsize=(7, 0.5 + 0.45 * max(1, len(conf["arms"]) if conf else 1)))
    if not conf or not conf.get("arms"):
        ax.text(0.5, 0.5, "no confirmation", ha="center", va="center", transform=ax.transAxes)
        return ax
    arms = list(conf["arms"])
    labels, med, lo, hi, colors = [], [], [], [], []
    for a in arms:
        ci = a["ci"]
        labels.append(arm_label(a))
        med.append(ci["estimate"])
        lo.append(ci["estimate"] - ci["low"])
        hi.append(ci["high"] - ci["estimate"])
        colors.append("tab:green" if a["label"] == conf.get("best") else
                      ("tab:gray" if a["kind"] == "baseline" else "tab:blue"))
    ypos = list(range(len(arms)))[::-1]
    for y, m, l, h, c in zip(ypos, med, lo, hi, colors):
        ax.errorbar(m, y, xerr=[[l], [h]], fmt="o", color=c, capsize=4)
    ax.set_yticks(ypos)
    ax.set_yticklabels(labels)
    ax.set_xlabel(f"median latency (µs), 95% CI, {conf['rounds']} interleaved rounds")
    v = d.get("verdict")
    title = "confirmation"
    if v:
        s = v["speedup"]
        title += f": {v['label']} ({s['estimate']:.3f}x [{s['low']:.3f}, {s['high']:.3f}] vs {v['against']})"
    ax.set_title(title, fontsize=10)
    return ax
