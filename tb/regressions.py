"""cocotb regressions inside the simulator, built from the testbench's parts.

Run with the cocotb runner (``tests/test_rtl_cocotb.py`` does, under pytest): the simulator is
started with ``+FOLLOW`` and an empty regular schedule file, and each ``@cocotb.test`` drives it
through a :class:`Bench`:

- :class:`~patton.tb.driver.Driver` appends one schedule segment per program to the file (the
  player, following the file, picks it up at the next cycle);
- the test awaits the player's ``segments`` counter, then the
  :class:`~patton.tb.monitor.Monitor` parses what the player wrote to the results file;
- the :class:`~patton.tb.reference.Reference` (the functional model replaying the schedule,
  alive across segments) gives the expected reads, ``verify`` the expected checker flags;
- the :class:`~patton.tb.scoreboard.Scoreboard` compares them.

Programs come from the cycle model (:class:`~patton.sim.executor.CycleExecutor`, one channel);
the channel keeps its state from one program to the next, as in a live
:class:`~patton.tb.executor.RtlExecutor`. Each regression runs in its own simulator (the
pytest wrapper passes ``testcase``). Add one: write an ``async def`` taking ``dut``, decorate
it with ``@cocotb.test()``, run programs through ``Bench(dut)``, ``bench.check()``, and
``await bench.finish()``; then list it in ``tests/test_rtl_cocotb.py``.
"""

from __future__ import annotations

from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import RisingEdge, Timer, ValueChange
from patton.hw.params import ChannelParams
from patton.sim.check import verify_from
from patton.sim.executor import CycleExecutor, closed
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.random_programs import KINDS, random_program
from patton.sim.timing import TIMING
from patton.tb.driver import DRAIN, Driver
from patton.tb.monitor import Monitor, PlayResult, RtlRead, RtlViolation, parse_mats
from patton.tb.player import SchedulePlayer
from patton.tb.reference import Reference
from patton.tb.scoreboard import Scoreboard

__all__ = ["Bench"]

#: What this RTL version executes: every kind of instruction (EWMUL, AF and RD_AF included).
RTL_KINDS = KINDS
_PERIOD_NS = 2


class Bench:
    """Driver, monitor, reference model and scoreboard around the player, for one channel.

    Reads ``+SCHEDULE``, ``+RESULTS``, ``+MATS`` and ``+ROWS`` from the plusargs.
    """

    def __init__(self, dut, channel: int = 0) -> None:  # noqa: ANN001 - the cocotb handle
        args = cocotb.plusargs
        self.dut = dut
        self.channel = channel
        self.params = ChannelParams(rows=int(args.get("ROWS", 64)))
        self.driver = Driver(SchedulePlayer(self.params, build=False).pack,
                             open(str(args["SCHEDULE"]), "ab"))
        self.results_path = Path(str(args["RESULTS"]))
        self.results = None  # opened once the player has (after the first clock edge)
        self.mats_path = Path(str(args["MATS"]))
        self.monitor = Monitor(self.params)
        self.cycle = CycleExecutor(record=True)
        self.reference = Reference()
        self.scoreboard = Scoreboard(strict=False)
        self.programs = 0

    async def start(self) -> None:
        """Start the clock."""
        Clock(self.dut.clk, _PERIOD_NS, unit="ns").start()
        await RisingEdge(self.dut.clk)
        self.results = open(self.results_path, "rb")

    def _now(self) -> int:
        return int(get_sim_time(unit="ns")) // _PERIOD_NS

    async def _answer(self, before: int) -> None:
        """Wait until the player has ended more than ``before`` segments (it flushes its
        results at each end line, in the cycle ``segments`` counts it)."""
        self.monitor.feed(self.results.read())
        while len(self.monitor.segments) <= before:
            await ValueChange(self.dut.segments)
            self.monitor.feed(self.results.read())

    async def run(self, program: list[Instruction]) -> PlayResult:
        """Schedule ``program``, replay it on the channel, compare; return the RTL's results."""
        prog = closed(program)
        start = self.cycle.state
        timed = self.cycle.run(prog)
        self.programs += 1
        cmds = [c for c in timed.schedule if c.channel == self.channel]
        found = verify_from(start, self.channel, cmds)
        illegal = {v.cycle for v in found if v.kind == "protocol"}
        expected = self.reference.run([c for c in cmds if c.cycle not in illegal])
        offset = max(self._now() + TIMING.quiet, self.monitor.cycle + TIMING.quiet)
        self.driver.send(self.driver.segment(cmds, offset, DRAIN))
        await self._answer(len(self.monitor.segments))
        got = self.monitor.take()
        assert got is not None
        result = PlayResult(
            reads=[RtlRead(r.cycle - offset, r.command, r.data) for r in got.reads],
            violations=[RtlViolation(v.cycle - offset, v.command, v.rules, v.protocol)
                        for v in got.violations],
            counter=got.counter, cycles=got.cycles - offset)
        self.scoreboard.compare([(r.command, r.data, "") for r in expected], result.reads,
                                self.programs, self.channel)
        self.scoreboard.check(cmds, result, found, self.programs, self.channel)
        self.scoreboard.settle()
        return result

    async def mats(self) -> None:
        """Dump the mats now and compare them with the reference's."""
        self.mats_path.write_text("")
        dumps = len(self.monitor.dumps)
        self.driver.send(self.driver.dump())
        while len(self.monitor.dumps) <= dumps:
            await Timer(10 * _PERIOD_NS, unit="ns")
            self.monitor.feed(self.results.read())
        self.monitor.dumps.popleft()
        self.scoreboard.mats(self.reference.mats(self.channel),
                             parse_mats(self.mats_path, self.params), self.programs,
                             self.channel)
        self.scoreboard.settle()

    async def finish(self) -> None:
        """Quit the player and wait for ``done``."""
        self.driver.send(self.driver.quit())
        await RisingEdge(self.dut.done)
        self.driver.stream.close()
        self.results.close()

    def check(self) -> None:
        """Fail the test with the scoreboard's findings, if any."""
        assert self.scoreboard.ok, "\n".join(str(d) for d in self.scoreboard.found[:10])


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@cocotb.test()
async def random_programs_on_a_live_channel(dut) -> None:  # noqa: ANN001
    """Three random programs in a row on one channel: every read bit-exact, no violation,
    mats equal at the end."""
    bench = Bench(dut)
    await bench.start()
    rng = np.random.default_rng(int(cocotb.plusargs.get("SEED", 1)))
    for _ in range(3):
        await bench.run(random_program(rng, 40, channels=1, rows=3, data=True,
                                       kinds=RTL_KINDS, broadcast=False))
    await bench.mats()
    bench.check()
    assert bench.scoreboard.reads > 0 and bench.scoreboard.mat_words > 0
    await bench.finish()


@cocotb.test()
async def accumulators_and_buffer_survive_programs(dut) -> None:  # noqa: ANN001
    """A program leaves the global buffer and the accumulators loaded; the next reads them."""
    bench = Bench(dut)
    await bench.start()
    rng = np.random.default_rng(2)
    mask = channel_bit(0)
    await bench.run([Instruction(Opcode.WR_GB, opsize=2, gpr0=0, channel_mask=mask,
                                 data=_words(rng, 32))]
                    + [Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=mask, bank=b, row=1,
                                   col=c, data=_words(rng, 16))
                       for b in range(16) for c in range(2)]
                    + [Instruction(Opcode.MAC_ABK, opsize=2, channel_mask=mask, row=1)])
    second = await bench.run([Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask),
                              Instruction(Opcode.MAC_ABK, opsize=2, channel_mask=mask, row=1),
                              Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask)])
    bench.check()
    assert len(second.reads) == 2 and second.reads[0].data.any()
    assert not np.array_equal(second.reads[0].data, second.reads[1].data)
    await bench.finish()
