"""``docs/timing-profiles.md``'s numbers: the two profiles' rule tables (facts of the code),
``all_isr.trace`` under each, and the Value-write ratios of ``docs/runtime.md`` §6."""

from __future__ import annotations

from collections.abc import Callable

from patton.sim.timing import TIMING, TimingRule, timing_table

from sources.common import Quick, record

_OLD = "aimsim-2eb1ee0"

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {
    "timing-profiles-all_isr-2eb1ee0": Quick(["-m", "patton.cli", "aim", "run",
                                              "tests/data/aim/all_isr.trace", "--timing", _OLD,
                                              "--json"]),
}


def _rules(name: str) -> int:
    """How many rules the profile ``name`` has (its empty slots aside)."""
    return len(timing_table(name).rules)


def _body(rule: TimingRule) -> tuple:
    """A rule without its id: scope, commands, expression, cycles."""
    return (rule.level, rule.preceding, rule.following, rule.expression, rule.cycles)


def _slots(name: str) -> dict[int, tuple]:
    """The profile ``name``'s rules by slot."""
    return {r.id: _body(r) for r in timing_table(name).rules}


def _edited() -> int:
    """How many slots 2eb1ee0's overlay edits (a rule changed or left out)."""
    new, old = _slots("aimsim-0f28a07"), _slots(_OLD)
    return sum(old.get(slot) != rule for slot, rule in new.items())


def _shared() -> int:
    """How many of 2eb1ee0's rules are 0f28a07's, unchanged, in the same slot."""
    new, old = _slots("aimsim-0f28a07"), _slots(_OLD)
    return sum(new.get(slot) == rule for slot, rule in old.items())


def _writes(model: str, timing: str) -> Callable[[], str]:
    """The per-bank ``W MEM`` over Commit Zone Value-write cycles (README's record)."""
    def made() -> str:
        ratio = record(f"value-writes-{model}")["timing"][timing]["no_cz_mem_over_cz"]
        return f"{ratio['cycles']:.2f}×"
    return made


#: Number name -> how it is made from the code and the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "timing-profiles.rules": lambda: str(_rules("aimsim-0f28a07")),
    "timing-profiles.rules.2eb1ee0": lambda: str(_rules(_OLD)),
    "timing-profiles.edited_slots": lambda: str(_edited()),
    "timing-profiles.shared_rules": lambda: str(_shared()),
    "timing-profiles.quiet": lambda: str(TIMING.quiet),
    "timing-profiles.all_isr.2eb1ee0": lambda: str(
        record("timing-profiles-all_isr-2eb1ee0")["cycles"]),
    "timing-profiles.all_isr.0f28a07": lambda: str(
        record("aim-reference")["all_isr"]["memory_system_cycles"]),
    "timing-profiles.writes.opt": _writes("opt-6.7b", "aimsim-0f28a07"),
    "timing-profiles.writes.opt.2eb1ee0": _writes("opt-6.7b", _OLD),
    "timing-profiles.writes.llama": _writes("llama3-8b", "aimsim-0f28a07"),
    "timing-profiles.writes.llama.2eb1ee0": _writes("llama3-8b", _OLD),
}
