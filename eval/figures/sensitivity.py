"""Sensitivity: what each assumption does to the headline claims (Fig. 7 and Fig. 8).

From the scale's assumptions (the paper's configuration, :mod:`patton.eval.assumptions`),
every varied axis is moved to each of its other values, one at a time, and Fig. 7's overall
speedup and energy gain and Fig. 8's three headlines (latency and energy reduction and
Value-write speedup against PATTON-wo-CZ, on the configuration's front end) are derived again,
at ``scale.sensitivity_steps`` steps. Every combination of the axes' values is run too (the
axes that only price a run differently, the front end, timing profile, GPU model and standby
accounting, cost nothing extra: one serving run prices them all, :class:`~patton.eval.tasks.
CostPass`), and the one closest to the paper's five numbers is reported: closest by the mean
absolute log ratio, a reduction ``r`` compared as the ratio ``1 / (1 - r)``.

The axes that only price a run (:data:`PRICING`: the GPU model and the standby accounting)
are also varied at the headline's steps (``at_headline_steps``): their tasks join the
headline's serving runs, so Fig. 7 and Fig. 8 at full scale under each value cost a pricing
pass, not a run.

Each row carries what its runs verified (programs checked, violations, mismatches: with
``check``, every cost task replays its runtime with every program verified).

An opt-in axis (a what-if beyond the paper's device: the device extension set) is varied only
when the scale names it (``Scale.what_if``), and then on every front end: one row per other
value and front end, none in the combinations (``docs/extensions.md``).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any

from patton.eval.assumptions import AXES, Assumptions
from patton.eval.figures import drawing, fig7, fig8, tables
from patton.eval.figures.figure import Figure, Pairs
from patton.eval.plan import Scale
from patton.eval.tasks import CostTask, Task

__all__ = ["FIGURE", "HEADLINES", "PAPER", "PRICING", "combinations", "distance"]

#: The axes that change only how a serving run is priced, not the run.
PRICING = ("gpu", "standby")

#: The headline numbers each row reports, in order, with their kind ("x" ratio, "%" fraction).
HEADLINES = {"fig7_speedup_all": "x", "fig7_energy_gain_all": "x",
             "fig8_latency_reduction": "%", "fig8_energy_reduction": "%",
             "fig8_value_write_speedup": "x"}

#: The paper's values of the headlines (Fig. 7's overall, Fig. 8's against PATTON-wo-CZ).
PAPER: dict[str, float] = {
    "fig7_speedup_all": fig7.PAPER["speedup"]["all"],
    "fig7_energy_gain_all": fig7.PAPER["energy_gain"]["all"],
    "fig8_latency_reduction": fig8.PAPER["shared"]["latency_reduction_vs_wo_cz"],
    "fig8_energy_reduction": fig8.PAPER["shared"]["energy_reduction_vs_wo_cz"],
    "fig8_value_write_speedup": fig8.PAPER["shared"]["value_write_speedup_vs_wo_cz"]}

#: Headline labels (tables, plots).
LABELS = {"fig7_speedup_all": "Fig. 7 speedup (all)",
          "fig7_energy_gain_all": "Fig. 7 energy gain (all)",
          "fig8_latency_reduction": "Fig. 8 latency reduction vs wo-CZ",
          "fig8_energy_reduction": "Fig. 8 energy reduction vs wo-CZ",
          "fig8_value_write_speedup": "Fig. 8 Value-write speedup vs wo-CZ"}


def combinations(base: Assumptions) -> list[Assumptions]:
    """Every combination of the varied axes' values but the opt-in ones (the others as in
    ``base``)."""
    varied = [a for a in AXES.values() if a.varied and not a.opt_in]
    return [base.with_(**dict(zip((a.name for a in varied), values, strict=True)))
            for values in itertools.product(*(a.values for a in varied))]


def _tasks_of(scale: Scale, a: Assumptions, steps: int | None = None) -> list[Task]:
    steps = scale.sensitivity_steps if steps is None else steps
    return [*fig7.tasks(scale, a, steps), *fig8.tasks(scale, a, steps, (a.frontend,))]


def _pricing(base: Assumptions) -> list[tuple[str, str, Assumptions]]:
    """The paper configuration and each other value of a pricing axis: (axis, value, a)."""
    out = [("none", "paper configuration", base)]
    for name in PRICING:
        out += [(name, v, base.with_(**{name: v})) for v in AXES[name].values
                if v != getattr(base, name)]
    return out


def _what_if(scale: Scale) -> list[tuple[str, str, Assumptions]]:
    """The opt-in axes' rows: each other value of an axis the scale names, on every front end
    (axis, value as the row names it, assumptions)."""
    base = scale.assumptions
    out = []
    for name in scale.what_if:
        axis = AXES[name]
        if not axis.opt_in:
            raise ValueError(f"{name!r} is not an opt-in axis (they are: "
                             f"{', '.join(a.name for a in AXES.values() if a.opt_in)})")
        for value in axis.values:
            if value == getattr(base, name):
                continue
            for f in AXES["frontend"].values:
                label = value if f == base.frontend else f"{value}, frontend={f}"
                out.append((name, label, base.with_(**{name: value, "frontend": f})))
    return out


def tasks(scale: Scale) -> list[Task]:
    """Fig. 7's and Fig. 8's tasks under every combination and opt-in row, at the
    sensitivity's steps, and under each pricing axis's values at the headline's steps."""
    out: dict[Task, None] = {}
    for a in combinations(scale.assumptions):
        out.update(dict.fromkeys(_tasks_of(scale, a)))
    for _, _, a in _what_if(scale):
        out.update(dict.fromkeys(_tasks_of(scale, a)))
    for _, _, a in _pricing(scale.assumptions):
        out.update(dict.fromkeys(_tasks_of(scale, a, scale.steps)))
    return list(out)


def _as_ratio(kind: str, v: float | None) -> float | None:
    """A headline as a positive ratio (a reduction r as 1 / (1 - r)); None if it has none."""
    if v is None:
        return None
    if kind == "%":
        return 1 / (1 - v) if v < 1 else None
    return v if v > 0 else None


def distance(row: dict[str, Any]) -> float | None:
    """The mean absolute natural-log ratio of ``row``'s headlines to the paper's."""
    logs = []
    for k, kind in HEADLINES.items():
        ours, theirs = _as_ratio(kind, row.get(k)), _as_ratio(kind, PAPER[k])
        if ours is None or theirs is None:
            return None
        logs.append(abs(math.log(ours / theirs)))
    return sum(logs) / len(logs)


def _row(pairs: Pairs, scale: Scale, a: Assumptions, steps: int | None = None
         ) -> dict[str, Any]:
    """The headlines under ``a`` at the sensitivity's steps (or ``steps``), and what their
    runs verified."""
    steps = scale.sensitivity_steps if steps is None else steps
    r7 = fig7.derive(pairs, scale, a, steps)
    r8 = fig8.derive(pairs, scale, a, steps, (a.frontend,))[a.frontend]
    row: dict[str, Any] = {
        "fig7_speedup_all": r7["speedup"]["all"],
        "fig7_energy_gain_all": r7["energy_gain"]["all"],
        "fig8_latency_reduction": r8["latency_reduction_vs_wo_cz"],
        "fig8_energy_reduction": r8["energy_reduction_vs_wo_cz"],
        "fig8_value_write_speedup": r8["value_write_speedup_vs_wo_cz"]}
    mine = set(_tasks_of(scale, a, steps))
    verified = [r for t, r in pairs if isinstance(t, CostTask) and t in mine]
    for k in ("checked_programs", "violations", "mismatches"):
        row[k] = sum(int(r.get(k) or 0) for r in verified)
    row["distance"] = distance(row)
    return row


def derive(pairs: Pairs, scale: Scale) -> dict[str, Any]:
    """The sensitivity's record (see the module docstring)."""
    base = scale.assumptions
    rows = [{"axis": "none", "value": "paper configuration", **_row(pairs, scale, base)}]
    for axis in AXES.values():
        if axis.opt_in:
            continue
        for value in axis.values:
            if value != getattr(base, axis.name):
                rows.append({"axis": axis.name, "value": value,
                             **_row(pairs, scale, base.with_(**{axis.name: value}))})
    rows += [{"axis": name, "value": label, **_row(pairs, scale, a)}
             for name, label, a in _what_if(scale)]
    scored = []
    for a in combinations(base):
        row = _row(pairs, scale, a)
        if row["distance"] is not None:
            scored.append((row["distance"], a, row))
    closest = None
    if scored:
        d, a, row = min(scored, key=lambda x: x[0])
        closest = {"assumptions": a.as_dict(), "differs_from_paper_configuration":
                   a.differs(base), **row}
    headline = {k: rows[0][k] for k in HEADLINES}  # the paper configuration's, at these steps
    return {**headline, "steps": scale.sensitivity_steps, "models": list(scale.models),
            "fig8_models": list(scale.fig8_models), "assumptions": base.as_dict(),
            "rows": rows, "combinations": len(combinations(base)), "closest": closest,
            "at_headline_steps": {"steps": scale.steps, "rows": [
                {"axis": axis, "value": value, **_row(pairs, scale, a, scale.steps)}
                for axis, value, a in _pricing(base)]}}


def summary(rec: dict[str, Any]) -> str:
    """How far each axis moves Fig. 7's overall speedup, and the closest combination."""
    base = rec["rows"][0]["fig7_speedup_all"]
    moves = []
    for r in rec["rows"][1:]:
        v = r["fig7_speedup_all"]
        if base and v is not None:
            moves.append(f"{r['axis']}={r['value']} {v / base:.2f}x")
    closest = rec.get("closest")
    near = ""
    if closest:
        changed = ", ".join(f"{k}={closest['assumptions'][k]}"
                            for k in closest["differs_from_paper_configuration"])
        near = f"; closest to the paper: {changed or 'the paper configuration'}"
    return (f"{rec['steps']:,} steps: Fig. 7 speedup {drawing.times(base)} moved by "
            + ", ".join(moves) + near)


def markdown(rec: dict[str, Any]) -> list[str]:
    """The rows as a table, then the closest combination."""
    num = tables.num
    head = ("axis", "value", *(LABELS[k] for k in HEADLINES), "verified (programs / "
            "violations / mismatches)")
    paper_row = ("paper", "", *(num(PAPER[k], kind) for k, kind in HEADLINES.items()), "")
    body = [paper_row] + [
        (r["axis"], r["value"], *(num(r[k], kind) for k, kind in HEADLINES.items()),
         f"{r['checked_programs']:,} / {r['violations']} / {r['mismatches']}")
        for r in rec["rows"]]
    lines = [f"Each row changes one assumption from the paper configuration "
             f"({rec['steps']:,} steps per run; Fig. 7 over {', '.join(rec['models'])}, "
             f"Fig. 8 over {', '.join(rec['fig8_models'])}).", ""]
    lines += tables.table(head, body)
    full = rec.get("at_headline_steps")
    if full:
        lines += ["", f"The axes that only price a run, at the headline's "
                  f"{full['steps']:,} steps (the same serving runs, priced again):", ""]
        lines += tables.table(head, [paper_row] + [
            (r["axis"], r["value"], *(num(r[k], kind) for k, kind in HEADLINES.items()),
             f"{r['checked_programs']:,} / {r['violations']} / {r['mismatches']}")
            for r in full["rows"]])
    c = rec.get("closest")
    if c:
        changed = ", ".join(f"{k}={c['assumptions'][k]}"
                            for k in c["differs_from_paper_configuration"]) or "none"
        lines += ["", f"Closest of the {rec['combinations']} combinations to the paper "
                  f"(mean |log ratio| {c['distance']:.3f}; changed from the paper "
                  f"configuration: {changed}):", ""]
        lines += tables.table(("", *(LABELS[k] for k in HEADLINES)),
                              [("closest", *(num(c[k], kind)
                                             for k, kind in HEADLINES.items()))])
    return lines


def plot(rec: dict[str, Any], path: Path) -> Path:
    """A tornado chart per headline: each axis's other value against the paper
    configuration's (the black line), the paper's value dashed red; the rows in the same
    order in every panel."""
    rows = rec["rows"]
    base, others = rows[0], rows[1:][::-1]  # the first axis at the top
    labels = [f"{r['axis']}={r['value']}" for r in others]
    fig = drawing.figure(14, 1.6 + 0.42 * len(others))
    keys = list(HEADLINES)
    for k, key in enumerate(keys):
        ax = fig.add_subplot(1, len(keys), k + 1)
        kind = HEADLINES[key]
        unit = 100.0 if kind == "%" else 1.0
        b = (base[key] or 0.0) * unit
        deltas = [0.0 if r[key] is None else r[key] * unit - b for r in others]
        ys = list(range(len(others)))
        ax.barh(ys, deltas, left=b, height=0.6,
                color=["#c44e52" if d < 0 else "#4c72b0" for d in deltas])
        ax.axvline(b, color="black", linewidth=1)
        ax.axvline(PAPER[key] * unit, color="red", linestyle="--", linewidth=1.2,
                   label="paper")
        ax.set_yticks(ys, labels if k == 0 else [""] * len(ys), fontsize=7)
        ax.set_title(LABELS[key] + (" (%)" if kind == "%" else " (x)"), fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        if k == 0:
            ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"Sensitivity: one assumption changed at a time from the paper "
                 f"configuration (black line), {rec['steps']:,} steps per run", fontsize=9)
    return drawing.save(fig, path)


FIGURE = Figure(
    name="sensitivity",
    title="Sensitivity: each assumption's effect on the headline claims",
    source="the assumptions of docs/evaluation.md; the paper's numbers of Fig. 7 and Fig. 8",
    paper=PAPER, tasks=tasks, derive=derive, summary=summary, markdown=markdown, plot=plot)
