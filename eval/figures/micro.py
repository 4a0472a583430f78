"""The microbenchmarks: the Commit Zone's row activations, and one SV reduction in fragments.

The activation ratio of single-token Value writes without the Commit Zone (the paper's
per-bank ``W MEM`` baseline) over with it (§4.4, Fig. 6's caption: 12.6x fewer, commits
included; :mod:`patton.eval.micro.value_writes`), and one 2 KB MAC run split into eight
fragments with intermediate RDMAC/WRBIAS, its latency and energy ratios (§3.2.2: 2.18x and
1.34x; :mod:`patton.eval.micro.fragmentation`).
"""

from __future__ import annotations

from typing import Any

from patton.eval.figures import tables
from patton.eval.figures.common import Pairs
from patton.eval.figures.figure import Figure
from patton.eval.plan import Scale
from patton.eval.tasks import FragmentationTask, Task, ValueWriteTask

__all__ = ["FIGURE", "PAPER"]

#: The paper's microbenchmark numbers.
PAPER: dict[str, float] = {"cz_activation_reduction": 12.6, "fragmentation_latency": 2.18,
                           "fragmentation_energy": 1.34}


def tasks(scale: Scale) -> list[Task]:
    """The fragmented reduction and the Value-write batch at the scale's size, on the
    assumptions' timing profile and front end."""
    a = scale.assumptions
    return [FragmentationTask(timing=a.timing),
            ValueWriteTask(requests=scale.value_write_requests, steps=scale.value_write_steps,
                           timing=a.timing, frontend=a.frontend)]


def derive(pairs: Pairs, scale: Scale) -> dict[str, Any]:
    """The microbenchmarks' record."""
    return record(pairs)


def record(pairs: Pairs) -> dict[str, Any]:
    """The microbenchmarks' record of the tasks in ``pairs``."""
    frag = next((r for t, r in pairs if isinstance(t, FragmentationTask)), None)
    writes = next(((t, r) for t, r in pairs if isinstance(t, ValueWriteTask)), None)
    if frag is None or writes is None:
        raise ValueError("micro: the fragmentation and Value-write results are both needed")
    task, vw = writes
    over_mem, over_abk = vw["no_cz_mem_over_cz"], vw["no_cz_abk_over_cz"]
    return {"cz_activation_reduction": float(over_mem["activations"]),
            "fragmentation_latency": float(frag["latency"]),
            "fragmentation_energy": float(frag["energy"]),
            "value_writes": {
                "model": task.model, "requests": task.requests, "steps": task.steps,
                "timing": task.timing, "frontend": task.frontend,
                "activation_reduction_vs_wr_abk": float(over_abk["activations"]),
                "cycle_speedup_vs_w_mem": float(over_mem["cycles"]),
                "cycle_speedup_vs_wr_abk": float(over_abk["cycles"]),
                "energy_gain_vs_w_mem": float(over_mem["energy_nj"]),
                "energy_gain_vs_wr_abk": float(over_abk["energy_nj"]),
                "paths": {k: vw[k] for k in ("cz", "no_cz_mem", "no_cz_abk")}},
            "fragmentation": frag, "timing": task.timing}


def summary(rec: dict[str, Any]) -> str:
    """The three ratios next to the paper's."""
    x = tables.num
    return (f"CZ activations {x(rec['cz_activation_reduction'], 'x')} (paper "
            f"{PAPER['cz_activation_reduction']}x), fragmentation "
            f"{x(rec['fragmentation_latency'], 'x')} / {x(rec['fragmentation_energy'], 'x')} "
            f"(paper {PAPER['fragmentation_latency']}x / {PAPER['fragmentation_energy']}x)")


def markdown(rec: dict[str, Any]) -> list[str]:
    """Ours next to the paper's, then the Value-write paths' other ratios."""
    num = tables.num
    lines = tables.side_by_side([
        ("CZ: row activations of single-token Value writes, no CZ (per-bank W MEM) over CZ",
         rec["cz_activation_reduction"], PAPER["cz_activation_reduction"], "x"),
        ("one 2 KB SV reduction in 8 fragments: latency", rec["fragmentation_latency"],
         PAPER["fragmentation_latency"], "x"),
        ("one 2 KB SV reduction in 8 fragments: energy", rec["fragmentation_energy"],
         PAPER["fragmentation_energy"], "x")])
    vw = rec.get("value_writes")
    if vw:
        lines += ["", (f"Value writes ({vw['model']}, {vw['requests']} requests x "
                       f"{vw['steps']} decode steps, {vw['timing']}, {vw['frontend']} front "
                       f"end): CZ over no CZ by `W MEM`: "
                       f"{num(vw['cycle_speedup_vs_w_mem'], 'x')} cycles, "
                       f"{num(vw['energy_gain_vs_w_mem'], 'x')} energy; over `WR_ABK`: "
                       f"{num(vw['cycle_speedup_vs_wr_abk'], 'x')} cycles, "
                       f"{num(vw['activation_reduction_vs_wr_abk'], 'x')} activations.")]
    return lines


FIGURE = Figure(
    name="micro", title="Microbenchmarks",
    source="cz_activation_reduction: §4.4 Committing a Filled CZ Slot; Fig. 6 caption; "
           "fragmentation_latency: §3.2.2 Value cache placement, capacity utilization "
           "conflict; fragmentation_energy: §3.2.2 Value cache placement, capacity "
           "utilization conflict",
    paper=PAPER, tasks=tasks, derive=derive, summary=summary, markdown=markdown)
