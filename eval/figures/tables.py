"""The markdown tables of ``repro.md``: numbers formatted, tables, ours next to the paper's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["num", "table", "side_by_side", "components"]


def num(v: Any, kind: str) -> str:
    """``v`` as ``kind``: ``"x"`` a ratio, ``"%"`` a fraction, ``"n"`` a count, else 3
    decimals; ``n/a`` for None."""
    if v is None:
        return "n/a"
    if kind == "x":
        return f"{v:.2f}x"
    if kind == "%":
        return f"{100 * v:.2f} %"
    if kind == "n":
        return f"{int(v):,}"
    return f"{v:.3f}"


def table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    """A markdown table's lines."""
    h = list(header)
    lines = ["| " + " | ".join(h) + " |", "|" + "---|" * len(h)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def side_by_side(rows: Iterable[tuple[str, Any, Any, str]]) -> list[str]:
    """The table "ours | paper | ratio" of ``(name, ours, paper's, kind)`` rows."""
    out = []
    for name, ours, theirs, kind in rows:
        r = None if ours is None or not theirs else ours / theirs
        out.append((name, num(ours, kind), num(theirs, kind),
                    "n/a" if r is None else f"{r:.2f}"))
    return table(("", "ours", "paper", "ratio"), out)


def components(d: dict[str, Any], caption: str) -> list[str]:
    """The table of a model's attention energy by component (nothing when not recorded)."""
    comps = d.get("energy_components")
    if not comps:
        return []
    names = list(next(iter(comps.values())))
    return ["", caption + ": attention energy by component, over PATTON's attention energy",
            ""] + table(("runtime", *names),
                         ((r, *(num(c[n], "f") for n in names)) for r, c in comps.items()))
