"""Deliberate bugs (mutants) that each module's own test file must catch.

Each mutant is one edit of one core module. The test runs that module's own test file on the
mutant (``tests/mutate.py`` loads it in place of the real module, in a process of its own;
the working tree is not touched) and requires a failure. They are the bugs an audit found
getting through other files' tests (``docs/testing.md``); ``benchmarks/mutation_score.py``
measures each core module against every mutant mutmut makes.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from mutate import TESTS, run


@dataclass(frozen=True)
class Mutant:
    """``old`` replaced by ``new`` (once) in ``module``; ``tests`` must fail on it."""

    name: str
    module: str
    old: str
    new: str
    tests: str


MUTANTS = [
    Mutant("RDMAC16 left out of the DQ energy", "patton.sim.energy",
           "_EXTERNAL = (C.RD, C.WR, C.RDA, C.WRA, C.WRGB, C.RDMAC16, C.RDAF16,",
           "_EXTERNAL = (C.RD, C.WR, C.RDA, C.WRA, C.WRGB, C.RDAF16,", "test_energy.py"),
    Mutant("a reused end state closes a bank the program left alone", "patton.sim.cost_cache",
           "np.where(flat == OTHER, rows.start, first[", "np.where(flat == OTHER, -1, first[",
           "test_cost_cache.py"),
    Mutant("blocks freed unhashed go to the tail of the free queue",
           "patton.serving.block_pool", "free.move_to_end(b, last=False)\n        for b in last",
           "free.move_to_end(b, last=True)\n        for b in last", "test_block_pool.py"),
    Mutant("AFM 0's LUT row refused", "patton.sim.protocol",
           "or AF_ROW_BASE <= r < AF_ROW_BASE + LUT_ROWS)",
           "or AF_ROW_BASE < r < AF_ROW_BASE + LUT_ROWS)", "test_protocol.py"),
]


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_modules_own_tests_catch_the_mutant(mutant: Mutant) -> None:
    done = run(mutant.module, mutant.old, mutant.new, [TESTS / mutant.tests])
    # 1: tests failed (2 would be an error loading the mutant, which proves nothing)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert " failed" in done.stdout.splitlines()[-1], done.stdout[-3000:]


def test_a_mutant_that_does_not_apply_is_an_error_not_a_kill() -> None:
    """An edit that is not in the source (the code moved on) stops the run: the mutant list
    cannot go stale into green."""
    done = run("patton.sim.energy", "no such text", "x", [TESTS / "test_energy.py"])
    assert done.returncode not in (0, 1)
    assert "occurs 0 times, not once" in done.stdout + done.stderr
