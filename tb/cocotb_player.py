"""The cocotb test the schedule player runs: start the clock, wait until the player is done.

Everything else happens outside the simulator: :mod:`patton.tb.player` writes the schedule file
before and reads the results file after, so the simulator runs freely in between.
"""

from __future__ import annotations

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import RisingEdge


@cocotb.test()
async def play(dut) -> None:
    """Replay the schedule named by +SCHEDULE and let the player write +RESULTS."""
    Clock(dut.clk, 2, unit="ns").start()
    await RisingEdge(dut.done)
