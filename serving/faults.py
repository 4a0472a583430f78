"""Faults for checking the checks: one thing corrupted on its way to the device.

:class:`Faults` observes the step driver (:mod:`patton.serving.driver`): it corrupts one write
or commit program before it runs, or (on the RTL, through its ``tamper`` hook) issues one
command a cycle early or flips one bit of one read, and says what it did. ``patton demo
--fault`` and the chat tests use it to see the checks (:mod:`patton.serving.checks`) catch
each kind.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from patton.sim.executor import Simulator
from patton.sim.isa import Opcode
from patton.sim.program import OP_ID, Program

__all__ = ["Faults"]


@dataclass(slots=True)
class Faults:
    """One injected fault, for checking that the loop's checks catch it (tests, ``--fault``).

    ``kind`` is one of :data:`KINDS`; the fault hits the first matching program of step
    ``step`` (or later, if that step has none): ``"kv-column"`` moves one Key write of the
    step's write program one column over; ``"commit-row"`` moves one write of a commit program
    one row down; ``"early"`` issues one command of the RTL schedule a cycle early;
    ``"read-bit"`` flips one bit of one RTL read-out. :attr:`hit` describes what was done.
    """

    KINDS = ("kv-column", "commit-row", "early", "read-bit")

    kind: str
    step: int
    hit: str | None = None  # what was corrupted, once it was
    columns: int = 32  # burst columns per row (a moved column wraps)
    executor: Any = None  # the device (set when the driver starts)
    _at: int = -1  # the step the RTL hook was handed out for

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; known: {', '.join(self.KINDS)}")

    def start(self, driver: Any) -> None:
        """Take the device (an RTL executor gets the tamper hook)."""
        self.executor = driver.forward.executor if driver.forward is not None else None

    def program(self, work: Any, phase: str, prog: Program) -> Program:
        """Return ``prog``, corrupted when this is the fault's program (an observer's hook of
        the step driver); arm the RTL's tamper hook for the step."""
        if isinstance(self.executor, Simulator):
            self.executor.tamper = self.rtl(work.index)
        return self.corrupt(work.index, phase, prog)

    def corrupt(self, step: int, phase: str, prog: Program) -> Program:
        """Return ``prog``, corrupted when this is the fault's program."""
        if self.hit is not None or step < self.step:
            return prog
        want = {"kv-column": "writes", "commit-row": "commits"}.get(self.kind)
        if phase != want or not len(prog):
            return prog
        ops = prog.op
        target = OP_ID[Opcode.WR_MEM] if self.kind == "kv-column" else None
        rows = [i for i in range(len(prog))
                if (target is None or ops[i] == target) and prog.row[i] >= 0
                and prog.size[i] > 0]
        if not rows:
            return prog
        i = rows[0]
        if self.kind == "kv-column":
            col = np.array(prog.col)
            col[i] = (int(col[i]) + 1) % self.columns
            bad = dataclasses.replace(prog, col=col)
            self.hit = (f"step {step}: write instruction {i} ({prog[i].opcode.value}) column "
                        f"{int(prog.col[i])} -> {int(col[i])}")
        else:
            row = np.array(prog.row)
            row[i] += 1
            bad = dataclasses.replace(prog, row=row)
            self.hit = (f"step {step}: commit instruction {i} ({prog[i].opcode.value}) row "
                        f"{int(prog.row[i])} -> {int(row[i])}")
        return bad

    def rtl(self, step: int) -> Callable[..., Any] | None:
        """Return the RTL executor's tamper hook for this step, or None."""
        if self.hit is not None or step < self.step or self.kind not in ("early", "read-bit"):
            return None
        self._at = step
        return self._tamper

    def _tamper(self, where: str, commands: list, reads: list | None,
                verify: Callable[[list], list] | None) -> tuple[list, list | None]:
        if self.hit is not None:
            return commands, reads
        if self.kind == "early" and reads is None and verify is not None:
            # the first command that, issued a cycle early, breaks exactly one timing rule
            for j in range(1, len(commands)):
                a, b = commands[j - 1], commands[j]
                if b.cycle - a.cycle < 2:
                    continue
                out = list(commands)
                out[j] = type(b)(**{**_fields(b), "cycle": b.cycle - 1})
                found = verify(out)
                if len(found) == 1 and found[0].kind == "timing":
                    self.hit = (f"step {self._at}: {where}: {b.command.name} due at cycle "
                                f"{b.cycle} issued at {b.cycle - 1}")
                    return out, reads
        if self.kind == "read-bit" and reads:
            r = reads[0]
            data = r.data.copy()
            data[0] ^= 1
            out = list(reads)
            out[0] = type(r)(**{**_fields(r), "data": data})
            self.hit = f"step {self._at}: {where}: read at cycle {r.cycle} lane 0 bit 0 flipped"
            return commands, out
        return commands, reads


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}
