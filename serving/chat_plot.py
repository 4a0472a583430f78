"""The chat's plot: every scheduler step's DRAM cycles, stacked by phase (``cycles.png``)."""

from __future__ import annotations

from pathlib import Path

from patton.serving.chat import CH_PER_HEAD, PHASES, ChatReport

__all__ = ["plot"]


def plot(report: ChatReport, path: Path) -> Path:
    """Write the stacked bars of each step's cycles by phase to ``path``; return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s.step for s in report.steps]
    fig, ax = plt.subplots(figsize=(10, 4), dpi=120)
    bottom = [0] * len(steps)
    for phase, colour in zip(PHASES, ("#4c72b0", "#dd8452", "#55a868", "#c44e52")):
        values = [s.cycles[phase] for s in report.steps]
        ax.bar(steps, values, bottom=bottom, width=1.0, label=phase, color=colour)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xlabel("scheduler step")
    ax.set_ylabel("DRAM cycles (0.5 ns)")
    where = "RTL" if report.device == "rtl" else "the models"
    if report.channels != CH_PER_HEAD:  # more than one ChPerHead group (one is the default)
        where += f", {report.kv_heads} KV heads on {report.channels} channels"
    ax.set_title(f"PATTON on {where}: cycles per step by phase")
    ax.set_ylim(0, max(bottom, default=1) * 1.18)  # room for the legend
    ax.set_xlim(-1, max(steps, default=0) + 1)
    ax.legend(ncols=4, frameon=False, loc="upper center")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
