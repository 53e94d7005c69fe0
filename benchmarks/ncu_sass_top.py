"""The SASS instructions with the most warp-stall samples in an Nsight Compute source page (ncu --page source --csv
--print-source sass; benchmarks/ncu_similarity.sh's "source" mode writes one): each with its share of all samples,
its address and the columns of its top stall reasons.

    python3 benchmarks/ncu_sass_top.py REPORT_sass.csv [N]
"""
from __future__ import annotations

import csv
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    path, top = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "40"
    if not top.isdigit():
        print(f"N={top!r}: pass how many instructions to list, a whole number (e.g. 40)", file=sys.stderr)
        return 2
    top = int(top)
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    head = next((i for i, r in enumerate(rows) if "Source" in r and any("Sampling" in c for c in r)), None)
    if head is None:
        print(f"{path}: no source table with stall sampling columns (first row: {rows[:1]})", file=sys.stderr)
        return 1
    cols = rows[head]
    src = cols.index("Source")
    addr = cols.index("Address") if "Address" in cols else None
    total_col = next(i for i, c in enumerate(cols) if c.startswith("Warp Stall Sampling (All"))
    reason_cols = [i for i, c in enumerate(cols)
                   if c.startswith("stall_") or (c.endswith("(All Samples)") and i != total_col)]

    def num(v: str) -> float:
        try:
            return float(v.replace(",", ""))
        except ValueError:
            return 0.0

    body = [r for r in rows[head + 1:] if len(r) == len(cols)]
    total = sum(num(r[total_col]) for r in body) or 1.0
    print(f"# {len(body)} SASS lines, {total:.0f} stall samples; top {top}:")
    for r in sorted(body, key=lambda r: -num(r[total_col]))[:top]:
        reasons = sorted(((num(r[i]), cols[i]) for i in reason_cols), reverse=True)[:3]
        why = ", ".join(f"{name} {v:.0f}" for v, name in reasons if v > 0)
        where = r[addr] if addr is not None else ""
        print(f"{100 * num(r[total_col]) / total:5.1f}%  {where:>8}  {r[src].strip()[:70]:<70}  {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
