"""The report of a coverage-closure run: summary figures, a table per cover group, in Markdown.

:func:`markdown` writes what ``patton rtl coverage`` saves as ``coverage.md`` (and prints the
summary of): the figures, one table per counted cover group (the timing groups side by side, one
row per rule), the unreachable bins with their reasons, the holes, and the scoreboard's verdict.
:func:`figures` is the JSON object. With ``--code``, :func:`code_markdown` writes
``code-coverage.md`` from the coverage build's counts (``patton.tb.code_coverage``): the
per-module table and every line point no command reached, with its Verilog source line.
:func:`write` saves them all in a folder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from patton.sim.extensions import ext_field
from patton.tb import code_coverage
from patton.tb.closure import Closure
from patton.tb.coverage import Group

__all__ = ["figures", "summary", "markdown", "code_figures", "code_summary", "code_markdown",
           "write", "Written", "CountsError"]


def figures(run: Closure) -> dict:
    """The JSON figures: ``rules_total``, ``rules_boundary_hit``, ``rules_violation_hit``,
    ``bins_total``, ``bins_hit``, ``bins_unreachable`` and the run's counters; last, the
    device extension set (``device_ext``) when it is not ``aim``."""
    board = run.scoreboard
    out = run.monitor.figures()
    out.update({"closed": run.closed, "agree": run.agree, "seed": run.seed,
                "cycles": run.cycles, "seconds": round(run.seconds, 2),
                "channel_seconds": round(run.channel_seconds, 2),
                "flagged": board.violations, "disagreements": board.disagreements,
                "reads": board.reads, "read_mismatches": board.mismatches,
                "mat_words": board.mat_words, "mat_mismatches": board.mat_mismatches,
                "rejected_errors": run.rejected_errors,
                "groups": {g.name: {"bins": len(g.bins), "hit": g.hit,
                                    "unreachable": len(g.unreachable)}
                           for g in run.monitor.groups()},
                "holes": run.monitor.holes(), **ext_field(run.monitor.timing.ext)})
    return out


def summary(run: Closure) -> list[str]:
    """The summary lines (what the command prints)."""
    f = figures(run)
    verdict = "agreed with the models" if run.agree else "DISAGREED with the models"
    device = []
    if "device_ext" in f:
        g = f["groups"]["ext.boundary"]
        device = [f"device extension set {f['device_ext']}: {g['bins']} timing pairs of its "
                  "commands (ext.boundary, ext.violation)"]
    return device + [
        f"rule coverage: {f['rules_boundary_hit']}/{f['rules_total']} boundary, "
        f"{f['rules_violation_hit']}/{f['rules_total']} violation; "
        f"{f['rules_legal_boundary_hit']}/{f['rules_total'] - f['rules_dominated']} boundary "
        f"by a legal command ({f['rules_dominated']} dominated by a larger gap)",
        f"bins: {f['bins_hit']}/{f['bins_total']} hit, {f['bins_unreachable']} unreachable"
        + ("" if run.closed else f", {sum(map(len, f['holes'].values()))} reachable not hit"),
        f"stimulus: {f['commands']:,} commands in {f['segments']} segments (seed {run.seed}), "
        f"{f['cycles']:,} channel cycles, {run.seconds:.1f} s ({run.channel_seconds:.1f} s "
        f"in the simulator)",
        f"the RTL {verdict}: {f['flagged']:,} commands flagged (on purpose), "
        f"{f['disagreements']} checker disagreements, {f['reads']:,} reads "
        f"({f['read_mismatches']} differ), {f['mat_words']:,} mat words "
        f"({f['mat_mismatches']} differ), {f['rejected_errors']} unimplemented commands not "
        "refused",
    ]


def _table(head: list[str], rows: list[list[object]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _least(group: Group) -> int:
    reachable = [n for b, n in group.bins.items() if b not in group.unreachable]
    return min(reachable, default=0)


def markdown(run: Closure, title: str = "RTL functional coverage") -> str:
    """The whole report as Markdown."""
    groups = {g.name: g for g in run.monitor.groups()}
    out = [f"# {title}", ""] + [f"- {line}" for line in summary(run)] + [""]
    out += ["## Cover groups", ""]
    out += _table(["group", "bins", "hit", "unreachable", "fewest hits"],
                  [[f"`{g.name}`", len(g.bins), g.hit, len(g.unreachable), _least(g)]
                   for g in groups.values()])
    boundary, violation = groups["timing.boundary"], groups["timing.violation"]
    legal = groups["timing.legal"]
    out += ["## Timing rules", "",
            "Boundary: issued exactly at the rule's minimum gap, the rule not flagged, the "
            "command executed; legal: and the RTL flagged nothing at all (a rule that a "
            "larger gap of the same command pairs dominates cannot be met so). Violation: one "
            "cycle short, the rule flagged.", ""]
    rows = []
    for label, hits in boundary.bins.items():
        rule, _, gap = label.partition(" ")
        expression, _, cycles = gap.rpartition(" = ")
        by = run.monitor.dominated.get(int(rule))
        rows.append([rule, f"`{expression}`", cycles, hits, legal.bins[label]
                     if by is None else f"dominated by {', '.join(map(str, by))}",
                     violation.bins[label]])
    out += _table(["rule", "gap", "cycles", "boundary hits", "legal boundary hits",
                   "violation hits"], rows)
    for name in ("command.state", "command.rejected", "protocol.error", "mac.cross",
                 "reads.return"):
        g = groups[name]
        out += [f"## `{name}`", ""]
        out += _table(["bin", "hits"], [[b, n] for b, n in g.bins.items()])
    if "ext.boundary" in groups:  # a device extension set: its commands' pairs
        ext_boundary, ext_violation = groups["ext.boundary"], groups["ext.violation"]
        out += ["## Pairs of the extension's commands", "",
                "Each (rule, preceding, following) pair in which a command the device "
                "extension adds takes part: boundary and violation hits by that pair.", ""]
        out += _table(["pair", "boundary hits", "violation hits"],
                      [[f"`{label}`", hits, ext_violation.bins[label]]
                       for label, hits in ext_boundary.bins.items()])
    unreachable = [(g.name, b, why) for g in groups.values() for b, why in g.unreachable.items()]
    out += ["## Unreachable bins", ""]
    out += (_table(["group", "bin", "why"], [list(u) for u in unreachable]) if unreachable
            else ["None: every bin of every group can be hit.", ""])
    holes = run.monitor.holes()
    out += ["## Holes", ""]
    out += ([f"- `{g}`: {', '.join(bins)}" for g, bins in holes.items()] + [""] if holes
            else ["None: every reachable bin was hit.", ""])
    found = run.scoreboard.found
    if found:
        out += ["## Discrepancies (first 50)", ""] + [f"- {d}" for d in found[:50]] + [""]
    return "\n".join(out)


def code_figures(points: list[code_coverage.Point]) -> dict:
    """The code coverage figures: the total and every report row, hit and total per kind."""
    def row(r: code_coverage.ModuleSummary) -> dict:
        return {"modules": r.modules, "lines": r.lines, "lines_hit": r.lines_hit,
                "branches": r.branches, "branches_hit": r.branches_hit,
                "toggles": r.toggles, "toggles_hit": r.toggles_hit}
    rows = code_coverage.summarise(points)
    artefacts, _ = _branches(points)
    return {**row(rows[-1]), "branch_artefacts": len(artefacts),
            "by_module": {r.module: row(r) for r in rows[:-1]}}


def code_summary(points: list[code_coverage.Point]) -> str:
    """The one line the command prints."""
    t = code_coverage.summarise(points)[-1]
    return (f"code coverage: lines {t.lines_hit:,}/{t.lines:,} ({t.line_percent:.1f} %), "
            f"branches {t.branches_hit:,}/{t.branches:,} ({t.branch_percent:.1f} %), "
            f"toggles {t.toggles_hit:,}/{t.toggles:,} ({t.toggle_percent:.1f} %)")


#: What Yosys's Verilog back end writes at the top of a process: ``if ($auto$...) begin end``,
#: a branch on a constant-zero wire that no input can take.
_ARTEFACT = "$auto$verilog_backend"


def _branches(points: list[code_coverage.Point]) -> tuple[list, list]:
    """Branch points not reached: (Yosys's empty ``if`` artefacts, the others)."""
    missed = code_coverage.uncovered(points, "branch")
    return ([m for m in missed if _ARTEFACT in m.source],
            [m for m in missed if _ARTEFACT not in m.source])


def code_markdown(points: list[code_coverage.Point], title: str = "RTL code coverage") -> str:
    """The code coverage report: the per-module table, the line points never reached with
    their source, and the branch points never taken (Yosys's empty ``if`` artefacts counted,
    the others listed)."""
    missed = code_coverage.uncovered(points, "line")
    artefacts, branches = _branches(points)
    out = [f"# {title}", "", f"- {code_summary(points)}",
           f"- of the {len(artefacts) + len(branches)} branch points not taken, "
           f"{len(artefacts)} are the empty `if ({_ARTEFACT}...) begin end` Yosys writes at "
           "the top of each process (a constant-zero condition no input can take)", "",
           "Verilator `--coverage-line --coverage-toggle` over the coverage-closure stimulus. "
           "A point counts once per module, hit when any instance hit it; numbered copies "
           "(`bank*`, `readout*`) are one row, their points added.", "",
           code_coverage.table(code_coverage.summarise(points))]
    for name, rows in ((f"Line points not reached ({len(missed)})", missed),
                       (f"Other branch points not taken ({len(branches)})", branches)):
        out += [f"## {name}", ""]
        out += (_table(["module", "line", "source"],
                       [[m.module, m.line, f"`{m.source}`".replace("|", "\\|")
                         if m.source else ""] for m in rows])
                if rows else ["None.", ""])
    return "\n".join(out)


class CountsError(Exception):
    """The coverage build's counts could not be moved into the report folder or read."""


@dataclass(frozen=True, slots=True)
class Written:
    """What :func:`write` saved."""

    figures: dict  # coverage.json's object (with "code" when there were counts)
    code: str | None  # the code coverage line (:func:`code_summary`) when there were counts


def write(run: Closure, folder: Path, counts: Path | None = None) -> Written:
    """Save the reports of a coverage run in ``folder`` (which exists).

    ``coverage.md`` (:func:`markdown`), ``coverage.json`` (:func:`figures`) and cocotb-coverage's
    ``coverage.xml``; given ``counts`` (the coverage build's Verilator counts), first those
    moved to ``coverage.dat``, ``code-coverage.md`` (:func:`code_markdown`) and
    ``coverage.info`` (lcov), the code figures added to the JSON as ``"code"``.

    Raises :class:`CountsError` when the counts cannot be moved or read.
    """
    found = figures(run)
    code = None
    if counts is not None:
        kept = folder / "coverage.dat"
        try:
            counts.replace(kept)
            points = code_coverage.read(kept)
        except (OSError, ValueError) as error:
            raise CountsError(f"the coverage build's counts ({counts}): {error}") from error
        (folder / "code-coverage.md").write_text(code_markdown(points))
        (folder / "coverage.info").write_text(code_coverage.lcov(points))
        found["code"] = code_figures(points)
        code = code_summary(points)
    (folder / "coverage.md").write_text(markdown(run))
    (folder / "coverage.json").write_text(json.dumps(found, indent=1) + "\n")
    run.monitor.export(str(folder / "coverage.xml"))
    return Written(found, code)
