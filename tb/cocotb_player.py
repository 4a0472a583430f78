"""The cocotb test a host-driven schedule player runs: start the clock, wait until it is done.

Everything else happens outside the simulator: a :class:`~patton.tb.session.Session` writes
schedule segments into the player's named pipe and reads its results pipe while the simulator
runs freely, for one segment (``SchedulePlayer.play``) or many (a live ``RtlExecutor``); the
player raises ``done`` on ``Q``. Regressions that drive the player from inside the simulator
are in :mod:`patton.tb.regressions`.
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
