"""Plain-text tables of benchmark figures, and the line saying when and where they were measured."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Sequence


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> str:
    """Plain-text table; align has one letter per column, l or r (default: l then r's)."""
    align = align or "l" + "r" * (len(headers) - 1)
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [
            c.ljust(w) if a == "l" else c.rjust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), rule, *(line(row) for row in cells[1:])])


def machine_line(fig: dict) -> str:
    """One line saying when and where figures were measured."""
    load = ", ".join(f"{x:.2f}" for x in fig["load_average"])
    return (
        f"{time.strftime('%Y-%m-%d %H:%M')}, {platform.machine()} {platform.system()}, "
        f"{os.cpu_count()} CPUs, load average (1/5/15 min) at the end {load}"
    )
