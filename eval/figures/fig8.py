"""Fig. 8: the Commit Zone, attention only: PATTON against PATTON-wo-CZ and BlockPIM (§5.4).

Attention only (the four PIM parts, no recomputation), per cycle-model front end: reductions
``1 - g`` where ``g`` is the geometric mean over the models of PATTON's cost over the other's;
the Value-write speedup is the geometric mean of wo-CZ's Value-write seconds over PATTON's.
``per_model`` gives every runtime's parts normalised to PATTON's total and, when the results
split their energy, ``energy_components`` over PATTON's attention energy. The paper has one
simulator front end; the same numbers stand next to both of ours (``shared``, the public
simulator's, and ``per_channel``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patton.eval.assumptions import PAPER as PAPER_ASSUMPTIONS
from patton.eval.assumptions import Assumptions
from patton.eval.figures import drawing, tables
from patton.eval.figures.common import (
    PARTS,
    Pairs,
    Runs,
    components,
    cost_task,
    geomean,
    ratio,
    reduction,
    results,
)
from patton.eval.figures.figure import Figure
from patton.eval.plan import Scale
from patton.eval.tasks import Task
from patton.sim.cycle_model import FRONTENDS

__all__ = ["FIGURE", "PAPER", "RUNTIMES"]

_PAPER = {"latency_reduction_vs_wo_cz": 0.130, "energy_reduction_vs_wo_cz": 0.124,
          "value_write_speedup_vs_wo_cz": 5.0, "latency_reduction_vs_blockpim": 0.227,
          "energy_reduction_vs_blockpim": 0.345}
#: The paper's Fig. 8 (§5.4, "Effectiveness of the Commit Zone"), next to both front ends.
PAPER: dict[str, dict[str, float]] = {"shared": dict(_PAPER), "per_channel": dict(_PAPER)}

#: Fig. 8's runtimes: PATTON, the Commit Zone ablation and BlockPIM (§5.4).
RUNTIMES = ("patton", "patton-wo-cz", "blockpim")

#: The record's keys as table rows.
LABELS = {"latency_reduction_vs_wo_cz": "attention latency reduction vs PATTON-wo-CZ",
          "energy_reduction_vs_wo_cz": "attention energy reduction vs PATTON-wo-CZ",
          "value_write_speedup_vs_wo_cz": "Value-write speedup vs PATTON-wo-CZ",
          "latency_reduction_vs_blockpim": "attention latency reduction vs BlockPIM",
          "energy_reduction_vs_blockpim": "attention energy reduction vs BlockPIM"}


def tasks(scale: Scale, assumptions: Assumptions | None = None, steps: int | None = None,
          frontends: tuple[str, ...] = FRONTENDS) -> list[Task]:
    """The three runtimes serving every Fig. 8 model's workload on ``frontends`` (both by
    default), under the scale's assumptions (or ``assumptions``) but for the front end."""
    a = scale.assumptions if assumptions is None else assumptions
    return [cost_task(scale, m, r, a.with_(frontend=f), steps=steps) for f in frontends
            for m in scale.fig8_models for r in RUNTIMES]


def derive(pairs: Pairs, scale: Scale, assumptions: Assumptions | None = None,
           steps: int | None = None, frontends: tuple[str, ...] = FRONTENDS) -> dict[str, Any]:
    """Fig. 8's record over the scale's Fig. 8 models (see the module docstring) from the
    results of :func:`tasks` with the same arguments."""
    a = scale.assumptions if assumptions is None else assumptions
    runs = {f: results(pairs, scale, scale.fig8_models, RUNTIMES, a.with_(frontend=f),
                       f"fig8 ({f})", steps) for f in frontends}
    return record(runs, scale.fig8_models, a)


def record(by_frontend: dict[str, Runs], models: tuple[str, ...] | list[str],
           assumptions: Assumptions = PAPER_ASSUMPTIONS) -> dict[str, Any]:
    """Fig. 8's record over ``models``: one entry per front end of ``by_frontend`` (front
    end -> model -> runtime -> cost), attention only, under ``assumptions`` (but for the
    front end)."""
    out: dict[str, Any] = {}
    per_model: dict[str, Any] = {}
    for f, by_model in by_frontend.items():
        g: dict[str, list[float | None]] = {k: [] for k in ("lat_cz", "en_cz", "vw", "lat_bp",
                                                            "en_bp")}
        per_model[f] = {}
        for m in models:
            runs = by_model[m]
            parts = {r: {p: float(runs[r]["parts"][p]["seconds"]) for p in PARTS}
                     for r in RUNTIMES}
            joules = {r: {p: float(runs[r]["parts"][p]["joules"]) for p in PARTS}
                      for r in RUNTIMES}
            lat = {r: sum(parts[r].values()) for r in RUNTIMES}
            en = {r: sum(joules[r].values()) for r in RUNTIMES}
            g["lat_cz"].append(ratio(lat["patton"], lat["patton-wo-cz"]))
            g["en_cz"].append(ratio(en["patton"], en["patton-wo-cz"]))
            g["vw"].append(ratio(parts["patton-wo-cz"]["v_write"], parts["patton"]["v_write"]))
            g["lat_bp"].append(ratio(lat["patton"], lat["blockpim"]))
            g["en_bp"].append(ratio(en["patton"], en["blockpim"]))
            per_model[f][m] = {
                "latency": {r: {**{p: ratio(v, lat["patton"]) for p, v in parts[r].items()},
                                "total": ratio(lat[r], lat["patton"])} for r in RUNTIMES},
                "energy": {r: {**{p: ratio(v, en["patton"]) for p, v in joules[r].items()},
                               "total": ratio(en[r], en["patton"])} for r in RUNTIMES},
                "value_write_speedup_vs_wo_cz": g["vw"][-1],
                "absolute": {r: {"seconds": lat[r], "joules": en[r]} for r in RUNTIMES}}
            split = components(runs, RUNTIMES)
            if split is not None:
                per_model[f][m]["energy_components"] = split
        out[f] = {"latency_reduction_vs_wo_cz": reduction(geomean(g["lat_cz"])),
                  "energy_reduction_vs_wo_cz": reduction(geomean(g["en_cz"])),
                  "value_write_speedup_vs_wo_cz": geomean(g["vw"]),
                  "latency_reduction_vs_blockpim": reduction(geomean(g["lat_bp"])),
                  "energy_reduction_vs_blockpim": reduction(geomean(g["en_bp"]))}
    out["models"] = list(models)
    out["assumptions"] = {k: v for k, v in assumptions.as_dict().items() if k != "frontend"}
    out["per_model"] = per_model
    return out


def summary(rec: dict[str, Any]) -> str:
    """Latency and energy against wo-CZ and the Value-write speedup, per front end."""
    def change(r: Any) -> str:  # a reduction of 0.13 is a change of -13.0 %
        return "n/a" if r is None else f"{-100 * r:+.1f} %"

    p = _PAPER
    return "; ".join(f"{f}: latency {change(rec[f]['latency_reduction_vs_wo_cz'])}, "
                     f"energy {change(rec[f]['energy_reduction_vs_wo_cz'])} vs wo-CZ "
                     f"(paper {change(p['latency_reduction_vs_wo_cz'])}, "
                     f"{change(p['energy_reduction_vs_wo_cz'])}), V writes "
                     f"{drawing.times(rec[f]['value_write_speedup_vs_wo_cz'])} (paper "
                     f"{p['value_write_speedup_vs_wo_cz']:g}x)" for f in FRONTENDS)


def markdown(rec: dict[str, Any]) -> list[str]:
    """Per front end: ours next to the paper's, then each model's parts."""
    num = tables.num
    lines: list[str] = []
    kinds = {"value_write_speedup_vs_wo_cz": "x"}
    for f in FRONTENDS:
        lines += ["", f"**{f} front end**", ""]
        lines += tables.side_by_side((LABELS[k], rec[f][k], PAPER[f][k], kinds.get(k, "%"))
                                     for k in PAPER[f])
        for m, d in rec.get("per_model", {}).get(f, {}).items():
            lines += ["", f"{m}, {f}: attention normalised to PATTON (K / V / QK / SV)", ""]
            lines += tables.table(("runtime", "latency", "parts", "energy", "parts"),
                                  ((r, num(d["latency"][r]["total"], "f"),
                                    " / ".join(num(d["latency"][r][k], "f") for k in PARTS),
                                    num(d["energy"][r]["total"], "f"),
                                    " / ".join(num(d["energy"][r][k], "f") for k in PARTS))
                                   for r in RUNTIMES))
            lines += tables.components(d, f"{m}, {f}")
    return lines[1:]


def plot(rec: dict[str, Any], path: Path) -> Path:
    """Attention latency and energy of PATTON, wo-CZ, BlockPIM per front end (and the energy
    by component, when the record splits it)."""
    split = all("energy_components" in d for f in FRONTENDS
                for d in rec["per_model"][f].values())
    rows = 3 if split else 2
    fig = drawing.figure(12, 3.5 * rows)
    panels: dict[int, list[Any]] = {}  # per row of the figure, its panels
    for c, f in enumerate(FRONTENDS):
        r = rec[f]
        if split:
            ax = fig.add_subplot(rows, 2, 4 + c + 1)
            drawing.stacked(ax, {m: d["energy_components"]
                                 for m, d in rec["per_model"][f].items()}, RUNTIMES,
                            drawing.COMPONENT_COLOURS, drawing.COMPONENT_LABELS)
            ax.set_ylabel("attention energy by component")
            ax.set_title(f"Fig. 8, {f} front end: energy by component, normalised to "
                         "PATTON's", fontsize=9)
            panels.setdefault(2, []).append(ax)
        for k, what in enumerate(("latency", "energy")):
            ax = fig.add_subplot(rows, 2, 2 * k + c + 1)
            means = {"patton-wo-cz": drawing.inverse(r[f"{what}_reduction_vs_wo_cz"]),
                     "blockpim": drawing.inverse(r[f"{what}_reduction_vs_blockpim"])}
            theirs = PAPER[f]
            paper_means = {"patton-wo-cz": 1 / (1 - theirs[f"{what}_reduction_vs_wo_cz"]),
                           "blockpim": 1 / (1 - theirs[f"{what}_reduction_vs_blockpim"])}
            drawing.stacked(ax, drawing.parts(rec["per_model"][f], what, PARTS, RUNTIMES),
                            RUNTIMES, drawing.COLOURS, drawing.LABELS, means, paper_means)
            ax.set_ylabel(f"normalised attention {what}")
            ax.set_title(f"Fig. 8, {f} front end: {what} (V writes "
                         f"{drawing.times(r['value_write_speedup_vs_wo_cz'])} faster than "
                         f"wo-CZ, paper 5x)" if what == "latency" else
                         f"Fig. 8, {f} front end: {what}", fontsize=9)
            panels.setdefault(k, []).append(ax)
    for k, axes in panels.items():  # the front ends side by side on one scale
        legend = k != 1  # the energy row has the latency row's parts
        drawing.headroom(axes, 0.4 if legend else 0.0)
        if legend:
            axes[0].legend(fontsize=7, ncols=3 if k == 0 else 4, loc="upper left")
    return drawing.save(fig, path)


FIGURE = Figure(
    name="fig8",
    title="Fig. 8: the Commit Zone, attention only (PATTON vs PATTON-wo-CZ and BlockPIM)",
    source="§5.4 Effectiveness of the Commit Zone (Fig. 8)",
    paper=PAPER, tasks=tasks, derive=derive, summary=summary, markdown=markdown, plot=plot)
