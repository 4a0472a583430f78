"""The AiM timing table, held as data: 104 Ramulator-style rules in ``data/timing_rules.json``.

A rule ``(level, preceding P, following F, value t)`` means: after P is issued at a node of that
level, F may be issued at the same node no earlier than ``t`` cycles later (one cycle = 0.5 ns).
Channel-scope commands touch only their channel node; single-bank commands touch their channel,
their bank group and their bank. Rules whose value is negative (refresh timings the public
simulator computes out of range) can never apply, because refresh is never issued.

:class:`TimingTable` compiles the rules two ways: by preceding command (what an issue makes
later commands wait for; the controller uses it) and by following command (which rules a command
must satisfy; the schedule checker uses it to name the violated rule).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from patton.sim.device import params
from patton.sim.isa import Command, Scope

__all__ = ["Rule", "TimingTable", "TIMING", "LEVELS"]

#: The levels timing rules attach to, in the order a single-bank command visits them.
LEVELS = (Scope.CHANNEL, Scope.BANKGROUP, Scope.BANK)
_LEVEL_NAMES = {"channel": Scope.CHANNEL, "bankgroup": Scope.BANKGROUP, "bank": Scope.BANK}


@dataclass(frozen=True, slots=True)
class Rule:
    """One timing rule of the table (its ``id`` is its index in ``timing_rules.json``)."""

    id: int  # index in the table
    level: Scope  # node level the rule lives at
    preceding: frozenset[Command]  # commands that start the wait
    following: frozenset[Command]  # commands that must wait
    expression: str  # the parameter expression, e.g. "nCWL + nBL + nWR"
    cycles: int  # its value in cycles


class TimingTable:
    """All timing rules plus the derived lookup tables.

    Members:
        rules: the rules in table order.
        after: ``after[level][P]`` is a tuple of ``(F, cycles)``, the largest gap per F.
        before: ``before[level][F]`` is a tuple of ``(rule id, P, cycles)`` for checking.
        latency: completion latency of each request-ending command (when the controller
            considers the request done: reads return data, writes retire).
        params: the timing parameters (cycles) by name.
    """

    def __init__(self, rules: list[Rule], parameters: dict) -> None:
        self.rules = tuple(rules)
        self.params = parameters
        n = len(Command)
        after: dict[Scope, list[dict[Command, int]]] = {lv: [{} for _ in range(n)]
                                                        for lv in LEVELS}
        before: dict[Scope, list[list[tuple[int, Command, int]]]] = {
            lv: [[] for _ in range(n)] for lv in LEVELS}
        for rule in self.rules:
            if rule.cycles < 0:
                continue
            for p in rule.preceding:
                table = after[rule.level][p]
                for f in rule.following:
                    table[f] = max(table.get(f, -1), rule.cycles)
            for f in rule.following:
                for p in sorted(rule.preceding):
                    before[rule.level][f].append((rule.id, p, rule.cycles))
        self.after = {lv: tuple(tuple(sorted(d.items())) for d in after[lv]) for lv in LEVELS}
        self.before = {lv: tuple(tuple(x) for x in before[lv]) for lv in LEVELS}
        p = parameters
        self.latency: dict[Command, int] = {
            Command.RD: p["nCL"] + p["nBL"],
            Command.WR: p["nCWL"] + p["nBL"],
            Command.WRGB: p["nCWLGB"] + p["nBL"],
            Command.WRMAC16: p["nCWLREG"] + p["nBL"],
            Command.RDMAC16: p["nCLREG"] + p["nBL"],
            Command.RDAF16: p["nCLREG"] + p["nBL"],
            Command.WRA16: p["nCWL"] + p["nBL"] + p["nRP"],
            Command.RDCP: 1, Command.WRCP: 1, Command.MAC: 1, Command.MAC16: 1,
            Command.AF16: 1, Command.EWMUL16: 1, Command.SYNC: 1, Command.EOC: 1,
        }

    @property
    def quiet(self) -> int:
        """Idle cycles after which no rule and no completion of earlier commands can matter.

        The largest gap of any rule that can apply (refresh is never issued) plus the longest
        completion latency: a device left idle this long may take any command.
        """
        refresh = {Command.REFab, Command.REFpb}
        gaps = [r.cycles for r in self.rules if r.cycles >= 0 and not r.preceding <= refresh]
        return max(gaps) + max(self.latency.values())

    def gap(self, level: Scope, preceding: Command, following: Command) -> int | None:
        """Return the minimum gap from ``preceding`` to ``following`` at ``level`` (or None)."""
        return dict(self.after[level][preceding]).get(following)

    @classmethod
    def load(cls) -> TimingTable:
        """Load the table shipped in ``data/timing_rules.json``."""
        text = resources.files(__package__).joinpath("data/timing_rules.json").read_text()
        rules = []
        for i, raw in enumerate(json.loads(text)):
            known = {c.name: c for c in Command}
            rules.append(Rule(
                id=i, level=_LEVEL_NAMES[raw["level"]],
                preceding=frozenset(known[c] for c in raw["pre"] if c in known),
                following=frozenset(known[c] for c in raw["fol"] if c in known),
                expression=raw["expr"], cycles=int(raw["val"])))
        return cls(rules, _parameters())


@cache
def _parameters() -> dict:
    return {k: v for k, v in params().items() if isinstance(v, int)}


#: The AiM timing table of the public simulator (HEAD), loaded once.
TIMING = TimingTable.load()
