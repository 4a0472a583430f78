"""Drawing the figures like the paper's (matplotlib, no display): stacked bars normalised to
PATTON, geometric means with the paper's marked, colours and names shared by every plot."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from patton.sim.textfile import write_atomic

__all__ = ["COLOURS", "LABELS", "NAMES", "COMPONENT_COLOURS", "COMPONENT_LABELS", "PAPER_MARK",
           "figure", "stacked", "headroom", "parts", "inverse", "times", "save"]

#: Stack colours (K write, V write, QK^T, SV, recompute) and labels.
COLOURS = {"k_write": "#4c72b0", "v_write": "#55a868", "qk": "#c44e52", "sv": "#8172b2",
           "recompute": "#ccb974"}
LABELS = {"k_write": "K write", "v_write": "V write", "qk": "QK$^T$", "sv": "SV",
          "recompute": "prefill recompute"}
NAMES = {"patton": "PATTON", "neupims": "NeuPIMs", "pimphony": "PIMphony", "attacc": "AttAcc",
         "blockpim": "BlockPIM", "patton-wo-cz": "wo-CZ", "gpu": "GPU",
         "patton-no-o2v": "no-O2V"}
#: Energy-component colours and labels (``patton.sim.energy.COMPONENTS``).
COMPONENT_COLOURS = {"act": "#c44e52", "read": "#dd8452", "write": "#55a868", "pim": "#8172b2",
                     "dq": "#4c72b0", "controller": "#937860", "global_buffer": "#da8bc3",
                     "standby": "#8c8c8c"}
COMPONENT_LABELS = {"act": "activations", "read": "reads", "write": "writes", "pim": "MACs",
                    "dq": "I/O", "controller": "controller", "global_buffer": "global buffer",
                    "standby": "standby"}
PAPER_MARK = {"color": "red", "marker": "_", "markersize": 14, "markeredgewidth": 2.5,
              "linestyle": "none"}


def figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    return Figure(figsize=(width, height), layout="constrained")


def stacked(ax: Any, bars: dict[str, dict[str, dict[str, float | None]]],
             runtimes: tuple[str, ...], colours: dict[str, str], labels: dict[str, str],
             means: dict[str, float | None] | None = None,
             paper_means: dict[str, float] | None = None) -> None:
    """Stacked bars per model and runtime (``bars[model][runtime]``: the stack, bottom up),
    then, with ``means``, a group of geometric means with the paper's marked."""
    models = list(bars)
    n = len(runtimes)
    width = 0.8 / n
    ticks, names = [], []
    for g, m in enumerate(models):
        for i, r in enumerate(runtimes):
            x = g + (i - (n - 1) / 2) * width
            bottom = 0.0
            for part, v in bars[m][r].items():
                ax.bar(x, v or 0.0, width * 0.9, bottom=bottom,
                       color=colours.get(part, "#cccccc"),
                       label=labels.get(part, part) if (g, i) == (0, 0) else None)
                bottom += v or 0.0
            ticks.append(x)
            names.append(NAMES.get(r, r))
    groups = list(models)
    if means is not None:
        g = len(models)
        for i, r in enumerate(runtimes):
            x = g + (i - (n - 1) / 2) * width
            ours = 1.0 if r == "patton" else means.get(r)
            if ours is not None:
                ax.bar(x, ours, width * 0.9, color="#999999",
                       label="ours, geomean" if i == 0 else None)
            theirs = 1.0 if r == "patton" else (paper_means or {}).get(r)
            if theirs is not None:
                ax.plot([x], [theirs], label="paper" if i == 0 else None, **PAPER_MARK)
            ticks.append(x)
            names.append(NAMES.get(r, r))
        groups.append("geomean")
    ax.set_xticks(ticks, names, rotation=90, fontsize=7)
    for g, m in enumerate(groups):
        ax.text(g, -0.32, m, transform=ax.get_xaxis_transform(), ha="center", fontsize=8)
    ax.axhline(1.0, color="black", linewidth=0.5)


def headroom(axes: list[Any], room: float = 0.4) -> None:
    """Give ``axes`` one y range, with ``room`` (a share of it) above the tallest bar for a
    legend."""
    bottom = min(ax.get_ylim()[0] for ax in axes)
    top = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        ax.set_ylim(bottom, top + room * (top - bottom))


def parts(per_model: dict[str, Any], what: str, stack: tuple[str, ...],
           runtimes: tuple[str, ...]) -> dict[str, dict[str, dict[str, float | None]]]:
    """The ``stack`` of ``what`` ("latency" or "energy") per model and runtime."""
    return {m: {r: {p: d[what][r].get(p) for p in stack} for r in runtimes}
            for m, d in per_model.items()}


def inverse(reduction: float | None) -> float | None:
    """The other's cost over PATTON's, from PATTON's reduction against it."""
    return None if reduction is None or reduction >= 1 else 1 / (1 - reduction)


def times(v: float | None) -> str:
    """A ratio as ``1.23x`` (``n/a`` for None)."""
    return "n/a" if v is None else f"{v:.2f}x"


def save(fig: Any, path: Path) -> Path:
    """Write ``fig`` to ``path`` (110 dpi; whole or not at all); return the path."""
    png = io.BytesIO()
    fig.savefig(png, dpi=110, format="png")
    return write_atomic(path, png.getvalue())
