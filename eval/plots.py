"""The figures as PNGs (matplotlib, no display): ``fig7.png``, ``fig8.png``, ``fig9.png``.

Drawn like the paper's: Fig. 7 and Fig. 8 as stacked bars per model and runtime, normalised to
PATTON (Key writes, Value writes, QK^T, SV and, in Fig. 7, the prefill recomputation), with a
last group of geometric means where the paper's ratios are marked (red bars' outlines);
Fig. 8 gets a third row when its record splits the energy by component: each runtime's
attention energy by the energy model's components (activations, I/O, MACs, standby, ...).
Fig. 9 as hit-rate bars per runtime, normal against pressure, the paper's values marked.
Each function takes a figure record (``figures.py``) and returns the file written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patton.eval import paper
from patton.eval.figures import PARTS, STACK

__all__ = ["fig7", "fig8", "fig9", "write"]

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


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure  # no pyplot: no display, no global state

    return Figure(figsize=(width, height), layout="constrained")


def _stacked(ax: Any, bars: dict[str, dict[str, dict[str, float | None]]],
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


def _headroom(axes: list[Any], room: float = 0.4) -> None:
    """Give ``axes`` one y range, with ``room`` (a share of it) above the tallest bar for a
    legend."""
    bottom = min(ax.get_ylim()[0] for ax in axes)
    top = max(ax.get_ylim()[1] for ax in axes)
    for ax in axes:
        ax.set_ylim(bottom, top + room * (top - bottom))


def _parts(per_model: dict[str, Any], what: str, stack: tuple[str, ...],
           runtimes: tuple[str, ...]) -> dict[str, dict[str, dict[str, float | None]]]:
    """The ``stack`` of ``what`` ("latency" or "energy") per model and runtime."""
    return {m: {r: {p: d[what][r].get(p) for p in stack} for r in runtimes}
            for m, d in per_model.items()}


def fig7(record: dict[str, Any], path: Path) -> Path:
    """Write Fig. 7: latency and energy per model and runtime, normalised to PATTON."""
    fig = _figure(10, 7)
    runtimes = ("patton", *paper.BASELINES)
    frontend = record.get("frontend", "shared")
    where = "" if frontend == "shared" else f", {frontend} front end"
    for k, (what, key, title) in enumerate((("latency", "speedup", "speedup"),
                                            ("energy", "energy_gain", "energy gain"))):
        ax = fig.add_subplot(2, 1, k + 1)
        _stacked(ax, _parts(record["per_model"], what, STACK, runtimes), runtimes, COLOURS,
                 LABELS, record[key], paper.FIG7[key])
        ax.set_ylabel(f"normalised {what}")
        ax.set_title(f"Fig. 7{where}: {what} normalised to PATTON (PATTON's {title} over "
                     f"all: {_x(record[key]['all'])}, paper {paper.FIG7[key]['all']}x)",
                     fontsize=9)
        if k == 0:
            _headroom([ax])
            ax.legend(fontsize=7, ncols=4, loc="upper left")
    return _save(fig, path)


def fig8(record: dict[str, Any], path: Path) -> Path:
    """Write Fig. 8: attention latency and energy of PATTON, wo-CZ, BlockPIM per front end."""
    from patton.eval.plan import FIG8_RUNTIMES, FRONTENDS

    split = all("energy_components" in d for f in FRONTENDS
                for d in record["per_model"][f].values())
    rows = 3 if split else 2
    fig = _figure(12, 3.5 * rows)
    panels: dict[int, list[Any]] = {}  # per row of the figure, its panels
    for c, f in enumerate(FRONTENDS):
        rec = record[f]
        if split:
            ax = fig.add_subplot(rows, 2, 4 + c + 1)
            _stacked(ax, {m: d["energy_components"]
                          for m, d in record["per_model"][f].items()}, FIG8_RUNTIMES,
                     COMPONENT_COLOURS, COMPONENT_LABELS)
            ax.set_ylabel("attention energy by component")
            ax.set_title(f"Fig. 8, {f} front end: energy by component, normalised to "
                         "PATTON's", fontsize=9)
            panels.setdefault(2, []).append(ax)
        for k, what in enumerate(("latency", "energy")):
            ax = fig.add_subplot(rows, 2, 2 * k + c + 1)
            means = {"patton-wo-cz": _inverse(rec[f"{what}_reduction_vs_wo_cz"]),
                     "blockpim": _inverse(rec[f"{what}_reduction_vs_blockpim"])}
            theirs = paper.FIG8[f]
            paper_means = {"patton-wo-cz": 1 / (1 - theirs[f"{what}_reduction_vs_wo_cz"]),
                           "blockpim": 1 / (1 - theirs[f"{what}_reduction_vs_blockpim"])}
            _stacked(ax, _parts(record["per_model"][f], what, PARTS, FIG8_RUNTIMES),
                     FIG8_RUNTIMES, COLOURS, LABELS, means, paper_means)
            ax.set_ylabel(f"normalised attention {what}")
            ax.set_title(f"Fig. 8, {f} front end: {what} (V writes "
                         f"{_x(rec['value_write_speedup_vs_wo_cz'])} faster than wo-CZ, "
                         f"paper 5x)" if what == "latency" else
                         f"Fig. 8, {f} front end: {what}", fontsize=9)
            panels.setdefault(k, []).append(ax)
    for k, axes in panels.items():  # the front ends side by side on one scale
        legend = k != 1  # the energy row has the latency row's parts
        _headroom(axes, 0.4 if legend else 0.0)
        if legend:
            axes[0].legend(fontsize=7, ncols=3 if k == 0 else 4, loc="upper left")
    return _save(fig, path)


def fig9(record: dict[str, Any], path: Path) -> Path:
    """Write Fig. 9: KV-cache hit rates per runtime, normal against pressure."""
    from patton.eval.plan import FIG9_RUNTIMES

    fig = _figure(7, 4)
    ax = fig.add_subplot(1, 1, 1)
    loads = ("normal", "pressure")
    width = 0.38
    for j, load in enumerate(loads):
        xs = [i + (j - 0.5) * width for i in range(len(FIG9_RUNTIMES))]
        ours = [100 * record[load][r] for r in FIG9_RUNTIMES]
        bars = ax.bar(xs, ours, width * 0.95, label=f"{load} (ours)",
                      color=("#4c72b0", "#dd8452")[j])
        ax.bar_label(bars, fmt="%.1f", fontsize=7, label_type="center", color="white")
        ax.plot(xs, [100 * paper.FIG9[load][r] for r in FIG9_RUNTIMES],
                label="paper" if j == 0 else None, **PAPER_MARK)
    ax.set_xticks(range(len(FIG9_RUNTIMES)), [NAMES[r] for r in FIG9_RUNTIMES])
    ax.set_ylabel("KV-cache hit rate (%)")
    ax.set_ylim(0, 115)  # room for the legend above the bars
    ax.set_title(f"Fig. 9: Llama-3-8B, 16 GiB; pressure: {record['pressure_live_tokens']:,} "
                 f"live tokens at most (paper > 250,000)", fontsize=9)
    ax.legend(fontsize=8, loc="upper center", ncols=3)
    return _save(fig, path)


def write(records: dict[str, Any], out: Path) -> list[Path]:
    """Write the PNG of every figure in ``records`` that has one; return the files."""
    drawn = {"fig7": fig7, "fig8": fig8, "fig9": fig9}
    return [drawn[f](records[f], out / f"{f}.png") for f in drawn if f in records]


def _inverse(reduction: float | None) -> float | None:
    """The other's cost over PATTON's, from PATTON's reduction against it."""
    return None if reduction is None or reduction >= 1 else 1 / (1 - reduction)


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _save(fig: Any, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    return path
