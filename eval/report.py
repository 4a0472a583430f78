"""The markdown report (``repro.md``): every figure's numbers next to the paper's.

Per figure one table "ours | paper | ratio" (ratio = ours / paper), then per-model tables
(Fig. 7, Fig. 8) or per-run detail (Fig. 9). A value that could not be computed is ``n/a``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from patton.eval import paper
from patton.eval.figures import PARTS, STACK

__all__ = ["markdown"]

TITLES = {"fig7": "Fig. 7: PATTON over the four prior layouts (geometric means over the models)",
          "fig8": "Fig. 8: the Commit Zone, attention only (PATTON vs PATTON-wo-CZ and BlockPIM)",
          "fig9": "Fig. 9: KV-cache hit rates, Llama-3-8B on the 16 GiB device",
          "micro": "Microbenchmarks"}


def _num(v: Any, kind: str) -> str:
    if v is None:
        return "n/a"
    if kind == "x":
        return f"{v:.2f}x"
    if kind == "%":
        return f"{100 * v:.2f} %"
    if kind == "n":
        return f"{int(v):,}"
    return f"{v:.3f}"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    h = list(header)
    lines = ["| " + " | ".join(h) + " |", "|" + "---|" * len(h)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _side_by_side(rows: Iterable[tuple[str, Any, Any, str]]) -> list[str]:
    out = []
    for name, ours, theirs, kind in rows:
        r = None if ours is None or not theirs else ours / theirs
        out.append((name, _num(ours, kind), _num(theirs, kind),
                    "n/a" if r is None else f"{r:.2f}"))
    return _table(("", "ours", "paper", "ratio"), out)


def _components(d: dict[str, Any], caption: str) -> list[str]:
    """The table of a model's attention energy by component (nothing when not recorded)."""
    comps = d.get("energy_components")
    if not comps:
        return []
    names = list(next(iter(comps.values())))
    return ["", caption + ": attention energy by component, over PATTON's attention energy",
            ""] + _table(("runtime", *names),
                         ((r, *(_num(c[n], "f") for n in names)) for r, c in comps.items()))


def _fig7(rec: dict[str, Any]) -> list[str]:
    p = paper.FIG7
    rows = [(f"speedup over {b}", rec["speedup"][b], p["speedup"][b], "x")
            for b in (*paper.BASELINES, "all")]
    rows += [(f"energy gain over {b}", rec["energy_gain"][b], p["energy_gain"][b], "x")
             for b in (*paper.BASELINES, "all")]
    lines = []
    if rec.get("frontend", "shared") != "shared":
        lines += [(f"Cycle-model front end: **{rec['frontend']}** (the paper's figure is on "
                   "the public simulator's shared decoder)."), ""]
    lines += _side_by_side(rows)
    for m, d in rec.get("per_model", {}).items():
        lines += ["", f"**{m}**: normalised to PATTON's total (stacks: "
                  + ", ".join(STACK) + ")", ""]
        body = []
        for r in ("patton", *paper.BASELINES):
            lat, en, ab = d["latency"][r], d["energy"][r], d["absolute"][r]
            body.append((r, _num(lat["total"], "f"),
                         " / ".join(_num(lat[k], "f") for k in STACK),
                         _num(en["total"], "f"), " / ".join(_num(en[k], "f") for k in STACK),
                         _num(ab.get("hit_rate"), "%"), _num(ab.get("decode_tokens"), "n"),
                         f"{ab['seconds']:.4g}", f"{ab['joules']:.4g}"))
        lines += _table(("runtime", "latency", "K / V / QK / SV / recompute", "energy",
                         "K / V / QK / SV / recompute", "hit rate", "decode tokens", "s",
                         "J"), body)
        lines += _components(d, f"{m}")
    return lines


#: Fig. 8's keys as table rows.
FIG8_LABELS = {"latency_reduction_vs_wo_cz": "attention latency reduction vs PATTON-wo-CZ",
               "energy_reduction_vs_wo_cz": "attention energy reduction vs PATTON-wo-CZ",
               "value_write_speedup_vs_wo_cz": "Value-write speedup vs PATTON-wo-CZ",
               "latency_reduction_vs_blockpim": "attention latency reduction vs BlockPIM",
               "energy_reduction_vs_blockpim": "attention energy reduction vs BlockPIM"}


def _fig8(rec: dict[str, Any]) -> list[str]:
    from patton.eval.plan import FIG8_RUNTIMES, FRONTENDS

    lines: list[str] = []
    kinds = {"value_write_speedup_vs_wo_cz": "x"}
    for f in FRONTENDS:
        lines += ["", f"**{f} front end**", ""]
        lines += _side_by_side((FIG8_LABELS[k], rec[f][k], paper.FIG8[f][k],
                                kinds.get(k, "%")) for k in paper.FIG8[f])
        for m, d in rec.get("per_model", {}).get(f, {}).items():
            lines += ["", f"{m}, {f}: attention normalised to PATTON (K / V / QK / SV)", ""]
            lines += _table(("runtime", "latency", "parts", "energy", "parts"),
                            ((r, _num(d["latency"][r]["total"], "f"),
                              " / ".join(_num(d["latency"][r][k], "f") for k in PARTS),
                              _num(d["energy"][r]["total"], "f"),
                              " / ".join(_num(d["energy"][r][k], "f") for k in PARTS))
                             for r in FIG8_RUNTIMES))
            lines += _components(d, f"{m}, {f}")
    return lines[1:]


def _fig9(rec: dict[str, Any]) -> list[str]:
    from patton.eval.plan import FIG9_RUNTIMES

    rows = [(f"{load}: {r}", rec[load][r], paper.FIG9[load][r], "%")
            for load in ("normal", "pressure") for r in FIG9_RUNTIMES]
    rows.append(("pressure: live context tokens (max)", rec["pressure_live_tokens"],
                 paper.FIG9["pressure_live_tokens"], "n"))
    lines = _side_by_side(rows)
    lines += ["", ("Runs (the paper's pressure is \"more than 250,000 live context tokens\"; "
                   "docs/evaluation.md says how ours is chosen):"), ""]
    body = []
    for load, runs in rec.get("runs", {}).items():
        for r, d in runs.items():
            body.append((load, r, f"{d['clients']} / {d['pool']}", _num(d["hit_rate"], "%"),
                         f"{d['live_mean']:,.0f} / {d['live_max']:,}",
                         _num(d["capacity_tokens"], "n"), _num(d["steps"], "n"),
                         _num(d["requests"], "n"),
                         "n/a" if d["stranded_mean"] is None else f"{d['stranded_mean']:,.0f}",
                         str(d["preemptions"])))
    lines += _table(("load", "runtime", "C / P", "hit rate", "live mean / max",
                     "capacity tokens", "steps", "requests", "stranded blocks (mean)",
                     "preemptions"), body)
    return lines


def _micro(rec: dict[str, Any]) -> list[str]:
    p = paper.MICRO
    lines = _side_by_side([
        ("CZ: row activations of single-token Value writes, no CZ (per-bank W MEM) over CZ",
         rec["cz_activation_reduction"], p["cz_activation_reduction"], "x"),
        ("one 2 KB SV reduction in 8 fragments: latency", rec["fragmentation_latency"],
         p["fragmentation_latency"], "x"),
        ("one 2 KB SV reduction in 8 fragments: energy", rec["fragmentation_energy"],
         p["fragmentation_energy"], "x")])
    vw = rec.get("value_writes")
    if vw:
        lines += ["", (f"Value writes ({vw['model']}, {vw['requests']} requests x "
                       f"{vw['steps']} decode steps, {vw['timing']}, {vw['frontend']} front "
                       f"end): CZ over no CZ by `W MEM`: "
                       f"{_num(vw['cycle_speedup_vs_w_mem'], 'x')} cycles, "
                       f"{_num(vw['energy_gain_vs_w_mem'], 'x')} energy; over `WR_ABK`: "
                       f"{_num(vw['cycle_speedup_vs_wr_abk'], 'x')} cycles, "
                       f"{_num(vw['activation_reduction_vs_wr_abk'], 'x')} activations.")]
    return lines


def markdown(records: dict[str, Any], *, command: str = "", wall_seconds: float | None = None,
             quick: bool = False) -> str:
    """Return the report of ``records`` (keyed by figure) as markdown text."""
    lines = ["# `patton repro`: the paper's evaluation, reproduced", ""]
    if command:
        lines.append(f"Command: `{command}`" + (f" ({wall_seconds:.0f} s of wall time)"
                                                 if wall_seconds is not None else ""))
        lines.append("")
    counted = {f: r for f, r in records.items() if "tasks" in r and "task_seconds" in r}
    if counted:
        lines += ["Tasks per figure and their own wall time, summed (tasks served by one run "
                  "share its time equally; a task two figures share counts in both; with "
                  "`--resume`, tasks taken from the store count with the time they took "
                  "then): " + ", ".join(
                      f"{f} {r['tasks']} ({r['task_seconds']:,.0f} s)"
                      for f, r in counted.items()) + ".", ""]
    if quick:
        lines += [("**--quick**: a pipeline check (a few hundred steps, two models); the "
                   "numbers are not the evaluation's."), ""]
    lines.append("Ratios are ours / paper. Paper: arXiv 2609.11392 (sections in "
                 "`patton/eval/paper.py`).")
    build = {"fig7": _fig7, "fig8": _fig8, "fig9": _fig9, "micro": _micro}
    for figure, rec in records.items():
        if figure not in build:
            continue
        lines += ["", f"## {TITLES[figure]}", "", f"Paper: {paper.SOURCES.get(figure, '')}"
                  if figure != "micro" else "Paper: " + "; ".join(
                      f"{k.split('.')[1]}: {v}" for k, v in paper.SOURCES.items()
                      if k.startswith("micro.")), ""]
        lines += build[figure](rec)
    return "\n".join(lines) + "\n"
