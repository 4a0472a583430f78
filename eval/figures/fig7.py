"""Fig. 7: PATTON's speedup and energy-efficiency gain over the four prior layouts (§5.3).

Per model and runtime, latency is the four PIM parts' seconds (Key writes, Value writes,
QK^T, SV) plus the runtime-induced prefill recomputation's seconds, energy likewise in
joules. ``speedup[b]`` is the geometric mean over the models of b's latency over PATTON's,
``energy_gain[b]`` the same for energy; ``all`` the geometric mean over the four baselines.
``per_model`` gives every runtime's parts normalised to PATTON's total (the stacked bars) and,
when the results split their energy, ``energy_components``: each runtime's attention energy
by the energy model's components over PATTON's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patton.eval.assumptions import PAPER as PAPER_ASSUMPTIONS
from patton.eval.assumptions import Assumptions
from patton.eval.figures import drawing, tables
from patton.eval.figures.common import (
    STACK,
    Pairs,
    Runs,
    components,
    cost_task,
    geomean,
    ratio,
    results,
    stack,
)
from patton.eval.figures.figure import Figure
from patton.eval.paper import BASELINES
from patton.eval.plan import Scale
from patton.eval.tasks import Task

__all__ = ["FIGURE", "PAPER"]

#: The paper's Fig. 7 (§5.3): PATTON's speedup and energy-efficiency gain over each baseline,
#: geometric means over the four models; ``all`` is the abstract's and §1's overall 1.95x /
#: 4.83x (the geometric mean over the four baselines: geomean(4.27, 1.42, 1.52, 1.57) = 1.950,
#: geomean(7.94, 6.77, 6.70, 1.51) = 4.829).
PAPER: dict[str, dict[str, float]] = {
    "speedup": {"neupims": 4.27, "pimphony": 1.42, "attacc": 1.52, "blockpim": 1.57,
                "all": 1.95},
    "energy_gain": {"neupims": 7.94, "pimphony": 6.77, "attacc": 6.70, "blockpim": 1.51,
                    "all": 4.83},
}

RUNTIMES = ("patton", *BASELINES)


def tasks(scale: Scale, assumptions: Assumptions | None = None,
          steps: int | None = None) -> list[Task]:
    """Every runtime serving every model's workload under the scale's assumptions (or
    ``assumptions``), for the scale's steps (or ``steps``)."""
    return [cost_task(scale, m, r, assumptions, steps=steps) for m in scale.models
            for r in RUNTIMES]


def derive(pairs: Pairs, scale: Scale, assumptions: Assumptions | None = None,
           steps: int | None = None) -> dict[str, Any]:
    """Fig. 7's record over the scale's models (see the module docstring) from the results
    of :func:`tasks` with the same arguments."""
    a = scale.assumptions if assumptions is None else assumptions
    return record(results(pairs, scale, scale.models, RUNTIMES, a, "fig7", steps),
                  scale.models, a)


def record(by_model: Runs, models: tuple[str, ...] | list[str],
           assumptions: Assumptions = PAPER_ASSUMPTIONS) -> dict[str, Any]:
    """Fig. 7's record over ``models`` from each model's runs (model -> runtime -> cost)
    under ``assumptions``."""
    per_model: dict[str, Any] = {}
    speed: dict[str, list[float | None]] = {b: [] for b in BASELINES}
    gain: dict[str, list[float | None]] = {b: [] for b in BASELINES}
    for m in models:
        runs = by_model[m]
        latency = {r: stack(runs[r], "seconds") for r in RUNTIMES}
        energy = {r: stack(runs[r], "joules") for r in RUNTIMES}
        lat_p, en_p = sum(latency["patton"].values()), sum(energy["patton"].values())
        detail: dict[str, Any] = {"speedup": {}, "energy_gain": {}, "latency": {},
                                  "energy": {}, "absolute": {}}
        for r in RUNTIMES:
            lat, en = sum(latency[r].values()), sum(energy[r].values())
            detail["latency"][r] = {k: ratio(v, lat_p) for k, v in latency[r].items()}
            detail["latency"][r]["total"] = ratio(lat, lat_p)
            detail["energy"][r] = {k: ratio(v, en_p) for k, v in energy[r].items()}
            detail["energy"][r]["total"] = ratio(en, en_p)
            c = runs[r]
            detail["absolute"][r] = {"seconds": lat, "joules": en,
                                     "hit_rate": c.get("hit_rate"), "steps": c.get("steps"),
                                     "decode_tokens": c.get("decode_tokens"),
                                     "prefill_tokens": c.get("prefill_tokens"),
                                     "violations": c.get("violations"),
                                     "mismatches": c.get("mismatches"),
                                     "checked_programs": c.get("checked_programs"),
                                     "wall_seconds": c.get("wall_seconds")}
            if r != "patton":
                detail["speedup"][r] = ratio(lat, lat_p)
                detail["energy_gain"][r] = ratio(en, en_p)
                speed[r].append(detail["speedup"][r])
                gain[r].append(detail["energy_gain"][r])
        split = components(runs, RUNTIMES)
        if split is not None:
            detail["energy_components"] = split
        per_model[m] = detail
    speedup = {b: geomean(speed[b]) for b in BASELINES}
    energy_gain = {b: geomean(gain[b]) for b in BASELINES}
    speedup["all"] = geomean(speedup.values())
    energy_gain["all"] = geomean(energy_gain.values())
    return {"speedup": speedup, "energy_gain": energy_gain, "models": list(models),
            "frontend": assumptions.frontend, "assumptions": assumptions.as_dict(),
            "per_model": per_model}


def summary(rec: dict[str, Any]) -> str:
    """The overall speedup and energy gain next to the paper's."""
    x = drawing.times
    return (f"speedup {x(rec['speedup']['all'])} (paper {PAPER['speedup']['all']}x), energy "
            f"{x(rec['energy_gain']['all'])} (paper {PAPER['energy_gain']['all']}x)")


def markdown(rec: dict[str, Any]) -> list[str]:
    """Ours next to the paper's, then each model's stacks normalised to PATTON."""
    num = tables.num
    rows = [(f"speedup over {b}", rec["speedup"][b], PAPER["speedup"][b], "x")
            for b in (*BASELINES, "all")]
    rows += [(f"energy gain over {b}", rec["energy_gain"][b], PAPER["energy_gain"][b], "x")
             for b in (*BASELINES, "all")]
    lines = []
    if rec.get("frontend", "shared") != "shared":
        lines += [(f"Cycle-model front end: **{rec['frontend']}** (the paper's figure is on "
                   "the public simulator's shared decoder)."), ""]
    lines += tables.side_by_side(rows)
    for m, d in rec.get("per_model", {}).items():
        lines += ["", f"**{m}**: normalised to PATTON's total (stacks: "
                  + ", ".join(STACK) + ")", ""]
        body = []
        for r in RUNTIMES:
            lat, en, ab = d["latency"][r], d["energy"][r], d["absolute"][r]
            body.append((r, num(lat["total"], "f"),
                         " / ".join(num(lat[k], "f") for k in STACK),
                         num(en["total"], "f"), " / ".join(num(en[k], "f") for k in STACK),
                         num(ab.get("hit_rate"), "%"), num(ab.get("decode_tokens"), "n"),
                         f"{ab['seconds']:.4g}", f"{ab['joules']:.4g}"))
        lines += tables.table(("runtime", "latency", "K / V / QK / SV / recompute", "energy",
                               "K / V / QK / SV / recompute", "hit rate", "decode tokens", "s",
                               "J"), body)
        lines += tables.components(d, f"{m}")
    return lines


def plot(rec: dict[str, Any], path: Path) -> Path:
    """Latency and energy per model and runtime, normalised to PATTON, stacked by part."""
    fig = drawing.figure(10, 7)
    frontend = rec.get("frontend", "shared")
    where = "" if frontend == "shared" else f", {frontend} front end"
    for k, (what, key, title) in enumerate((("latency", "speedup", "speedup"),
                                            ("energy", "energy_gain", "energy gain"))):
        ax = fig.add_subplot(2, 1, k + 1)
        drawing.stacked(ax, drawing.parts(rec["per_model"], what, STACK, RUNTIMES), RUNTIMES,
                        drawing.COLOURS, drawing.LABELS, rec[key], PAPER[key])
        ax.set_ylabel(f"normalised {what}")
        ax.set_title(f"Fig. 7{where}: {what} normalised to PATTON (PATTON's {title} over "
                     f"all: {drawing.times(rec[key]['all'])}, paper {PAPER[key]['all']}x)",
                     fontsize=9)
        if k == 0:
            drawing.headroom([ax])
            ax.legend(fontsize=7, ncols=4, loc="upper left")
    return drawing.save(fig, path)


FIGURE = Figure(
    name="fig7",
    title="Fig. 7: PATTON over the four prior layouts (geometric means over the models)",
    source="§5.3 Performance Comparison with the Baselines (Fig. 7); overall: Abstract, §1",
    paper=PAPER, tasks=tasks, derive=derive, summary=summary, markdown=markdown, plot=plot)
