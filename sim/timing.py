"""The AiM timing tables, held as data: one Ramulator-style rule table per *timing profile*.

A rule ``(level, preceding P, following F, value t)`` means: after P is issued at a node of that
level, F may be issued at the same node no earlier than ``t`` cycles later (one cycle = 0.5 ns).
Channel-scope commands touch only their channel node; single-bank commands touch their channel,
their bank group and their bank. Rules whose value is negative (refresh timings the public
simulator computes out of range) can never apply, because refresh is never issued.

A profile is the public AiM simulator's GDDR6 table at one commit (``data/timing_profiles.json``,
``docs/timing-profiles.md``):

``aimsim-0f28a07`` (:data:`DEFAULT_PROFILE`)
    its head: the 104 rules of ``data/timing_rules.json``, against which the cycle model is
    exact on every public trace.
``aimsim-2eb1ee0``
    the commit the CENT artifact pins (the timing the PATTON paper's figures used): the same
    table with the slots that commit has differently edited (an overlay, applied here).

A table is compiled for one profile on one *device extension set* (:mod:`patton.sim.extensions`;
default ``aim``, the public simulator's device): an extension's commands get rules derived from
the profile's, in slots appended after the profile's.

Invariants: a rule's ``id`` is its slot in the base table (the index in ``timing_rules.json``);
an overlay replaces the rule in a slot or empties it, never adds one, so an id names the same
slot in every profile and every profile id is below :data:`SLOTS` (the RTL's rule-mask width
on ``aim``); an extension appends slots from :data:`SLOTS` on (:attr:`TimingTable.slots`).
Timing parameters, and so the completion latencies and :attr:`TimingTable.quiet`, are shared by
all profiles. Each (profile, extension set) is compiled once per process (:func:`timing_table`).

:class:`TimingTable` compiles the rules two ways: by preceding command (what an issue makes
later commands wait for; the controller uses it) and by following command (which rules a command
must satisfy; the schedule checker uses it to name the violated rule).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TypeAlias

from patton.sim.device import params
from patton.sim.extensions import DEFAULT_EXT, EXTENSION_COMMANDS, DeviceExt, device_ext
from patton.sim.isa import Command, Scope

__all__ = ["TimingRule", "TimingTable", "TIMING", "LEVELS", "PROFILES", "DEFAULT_PROFILE", "SLOTS",
           "Timing", "UnknownProfileError", "timing_table", "ext_rules"]

#: The levels timing rules attach to, in the order a single-bank command visits them.
LEVELS = (Scope.CHANNEL, Scope.BANKGROUP, Scope.BANK)
_LEVEL_NAMES = {"channel": Scope.CHANNEL, "bankgroup": Scope.BANKGROUP, "bank": Scope.BANK}


@dataclass(frozen=True, slots=True)
class TimingRule:
    """One timing rule (its ``id`` is its slot: the index in ``timing_rules.json``)."""

    id: int  # slot in the base table, the same in every profile
    level: Scope  # node level the rule lives at
    preceding: frozenset[Command]  # commands that start the wait
    following: frozenset[Command]  # commands that must wait
    expression: str  # the parameter expression, e.g. "nCWL + nBL + nWR"
    cycles: int  # its value in cycles


class TimingTable:
    """All timing rules of one profile plus the derived lookup tables.

    Members:
        name: the profile's name (``"aimsim-0f28a07"``, ...; ``"custom"`` for a hand-made
            table).
        rules: the rules in id order (ids may skip the slots a profile leaves empty).
        after: ``after[level][P]`` is a tuple of ``(F, cycles)``, the largest gap per F.
        before: ``before[level][F]`` is a tuple of ``(rule id, P, cycles)`` for checking.
        latency: completion latency of each request-ending command (when the controller
            considers the request done: reads return data, writes retire).
        params: the timing parameters (cycles) by name.
        ext: the device extension set's name (``"aim"``: none).
        device: that extension set (:class:`~patton.sim.extensions.DeviceExt`).
        commands: the commands the device has, in value order.
        slots: the rule-mask width: :data:`SLOTS`, or more when an extension appends rules.
    """

    def __init__(self, rules: list[TimingRule], parameters: dict, name: str = "custom",
                 ext: str = DEFAULT_EXT) -> None:
        self.name = name
        self.device: DeviceExt = device_ext(ext)
        self.ext = self.device.name
        self.commands = self.device.commands
        self.rules = tuple(sorted(rules, key=lambda r: r.id))
        ids = [r.id for r in self.rules]
        if len(set(ids)) != len(ids) or any(i < 0 for i in ids):
            raise ValueError(f"timing table {name!r}: rule ids must be distinct and >= 0")
        self._by_id = {r.id: r for r in self.rules}
        self.slots = max([SLOTS, *(i + 1 for i in ids)])
        # The rules are frozen: their part of :meth:`fingerprint` is made once.
        self._rule_prints = json.dumps([(r.id, r.level.name, sorted(c.name for c in r.preceding),
                                         sorted(c.name for c in r.following), r.cycles)
                                        for r in self.rules])
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
        self.latency.update(self.device.latency(p))

    def __repr__(self) -> str:
        on = "" if self.ext == DEFAULT_EXT else f" on {self.ext}"
        return f"<TimingTable {self.name}{on}: {len(self.rules)} rules>"

    @property
    def quiet(self) -> int:
        """Idle cycles after which no rule and no completion of earlier commands can matter.

        The largest gap of any rule that can apply (refresh is never issued) plus the longest
        completion latency: a device left idle this long may take any command.
        """
        refresh = {Command.REFab, Command.REFpb}
        gaps = [r.cycles for r in self.rules if r.cycles >= 0 and not r.preceding <= refresh]
        return max(gaps) + max(self.latency.values())

    def rule(self, rule_id: int) -> TimingRule:
        """Return the rule in slot ``rule_id`` (``KeyError`` if this profile leaves it empty)."""
        return self._by_id[rule_id]

    def gap(self, level: Scope, preceding: Command, following: Command) -> int | None:
        """Return the minimum gap from ``preceding`` to ``following`` at ``level`` (or None)."""
        return dict(self.after[level][preceding]).get(following)

    def fingerprint(self) -> str:
        """A text that changes whenever any rule, value or parameter changes (build keys)."""
        # json.dumps([name, rules, params(, ext)]), with the rules' part made once; the
        # extension set only when it is not the default, so default keys never move
        ext = "" if self.ext == DEFAULT_EXT else f", {json.dumps(self.ext)}"
        return (f"[{json.dumps(self.name)}, {self._rule_prints}, "
                f"{json.dumps(sorted(self.params.items()))}{ext}]")

    @classmethod
    def load(cls, name: str | None = None, ext: str = DEFAULT_EXT) -> TimingTable:
        """Compile profile ``name`` (default :data:`DEFAULT_PROFILE`) from ``data/``, on
        extension set ``ext``.

        Prefer :func:`timing_table`, which compiles each profile once per process.

        Raises:
            UnknownProfileError: ``name`` is not one of :data:`PROFILES`.
            UnknownExtensionError: ``ext`` is not an extension set.
        """
        name = DEFAULT_PROFILE if name is None else name
        device = device_ext(ext)
        return cls(list(ext_rules(_rules(name), device)), _parameters(), name, device.name)


Timing: TypeAlias = "str | TimingTable"
"""What a ``timing=`` argument takes: a profile name (:data:`PROFILES`) or a compiled table."""


class UnknownProfileError(ValueError):
    """A timing profile name that is not one of :data:`PROFILES` (the message names them)."""

    def __init__(self, name: object) -> None:
        super().__init__(f"unknown timing profile {name!r}; choose one of: "
                         + ", ".join(PROFILES))
        self.name = name


def _read(path: str) -> object:
    return json.loads(resources.files(__package__).joinpath(path).read_text())


@cache
def _profiles() -> dict:
    return _read("data/timing_profiles.json")


def _rule(slot: int, raw: dict) -> TimingRule:
    """Turn one JSON rule record into a :class:`TimingRule` (commands the ISA lacks are dropped)."""
    known = {c.name: c for c in Command}
    return TimingRule(id=slot, level=_LEVEL_NAMES[raw["level"]],
                preceding=frozenset(known[c] for c in raw["pre"] if c in known),
                following=frozenset(known[c] for c in raw["fol"] if c in known),
                expression=raw["expr"], cycles=int(raw["val"]))


def _entry(name: object) -> dict:
    entry = _profiles()["profiles"].get(name) if isinstance(name, str) else None
    if entry is None:
        raise UnknownProfileError(name)
    return entry


def _slots(name: str) -> int:
    """Return the number of slots of profile ``name``: its root table's length."""
    entry = _entry(name)
    return len(_read(f"data/{entry['rules']}")) if "rules" in entry else _slots(entry["base"])


@cache
def _rules(name: str) -> tuple[TimingRule, ...]:
    """Return profile ``name``'s rules in slot order: its base's, with its overlay applied."""
    entry = _entry(name)
    if "rules" in entry:
        return tuple(_rule(i, r) for i, r in enumerate(_read(f"data/{entry['rules']}")))
    rules = {r.id: r for r in _rules(entry["base"])}
    width = _slots(name)
    for key, raw in entry["slots"].items():
        slot = int(key)
        if not 0 <= slot < width:
            raise ValueError(f"timing profile {name!r}: slot {slot} is outside the base table "
                             f"(0..{width - 1}); an overlay edits slots, it never adds them")
        if raw is None:
            rules.pop(slot, None)
        else:
            rules[slot] = _rule(slot, raw)
    return tuple(rules[i] for i in sorted(rules))


def ext_rules(rules: tuple[TimingRule, ...], device: DeviceExt) -> tuple[TimingRule, ...]:
    """Return ``rules`` with the timing of ``device``'s features derived into them.

    For each feature: its command joins every rule that names the command it is ``like`` on the
    same side, except rules whose preceding side names ``like`` while the following side lies
    within ``drop_following``; its added rules take the slots from :data:`SLOTS` on. With no
    feature the rules are returned as they are.
    """
    out = list(rules)
    slot = SLOTS
    for feature, recipe in zip(device.features, device.timing()):
        like = Command[recipe["like"]]
        (command,) = (c for c, f in EXTENSION_COMMANDS.items() if f == feature)
        drop = frozenset(Command[c] for c in recipe["drop_following"])
        for i, rule in enumerate(out):
            pre, fol = rule.preceding, rule.following
            if like in pre and not fol <= drop:
                pre = pre | {command}
            if like in fol:
                fol = fol | {command}
            if (pre, fol) != (rule.preceding, rule.following):
                out[i] = TimingRule(rule.id, rule.level, pre, fol, rule.expression, rule.cycles)
        for raw in recipe["add"]:
            out.append(_rule(slot, raw))
            slot += 1
    return tuple(out)


@cache
def _parameters() -> dict:
    return {k: v for k, v in params().items() if isinstance(v, int)}


#: Every timing profile shipped in ``data/timing_profiles.json``, in file order.
PROFILES: tuple[str, ...] = tuple(_profiles()["profiles"])
#: The profile used wherever none is named (the public simulator's head, 0f28a07).
DEFAULT_PROFILE: str = _profiles()["default"]


@cache
def _compiled(name: str, ext: str) -> TimingTable:
    return TimingTable.load(name, ext)


def timing_table(timing: Timing | None = None, ext: str | None = None) -> TimingTable:
    """Return the compiled table for ``timing`` on extension set ``ext``.

    ``timing`` is a profile name, a table (returned as is) or ``None`` (:data:`DEFAULT_PROFILE`);
    ``ext`` is an extension set name or ``None`` (a table's own; ``aim`` for a name). Each
    (profile, extension set) is compiled once per process.

    Raises:
        UnknownProfileError: an unknown profile name (the message lists :data:`PROFILES`).
        UnknownExtensionError: an unknown extension set (the message lists them).
        ValueError: a table together with an extension set other than its own.
        TypeError: neither a name nor a :class:`TimingTable`.
    """
    if isinstance(timing, TimingTable):
        if ext is not None and device_ext(ext).name != timing.ext:
            raise ValueError(f"timing table {timing.name!r} is compiled for device extension "
                             f"{timing.ext!r}, not {ext!r}")
        return timing
    ext = device_ext(ext).name
    if timing is None:
        return _compiled(DEFAULT_PROFILE, ext)
    if isinstance(timing, str):
        if timing not in PROFILES:
            raise UnknownProfileError(timing)
        return _compiled(timing, ext)
    raise TypeError(f"timing must be a profile name or a TimingTable, not {timing!r}")


#: The number of rule slots (the base table's length): every profile's ids are below it.
SLOTS: int = _slots(DEFAULT_PROFILE)
#: The default profile's table (``aimsim-0f28a07``), compiled once.
TIMING = timing_table(DEFAULT_PROFILE)
