"""Preparing traces and schedules for the RTL channel: payloads and row checks.

``fill_payloads`` gives every write that carries no ``data=`` a seeded random bfloat16 payload
(the RTL replays explicit payloads only); ``check_trace_rows`` / ``check_schedule_rows`` refuse
a row beyond the RTL build's ``--rows`` with ``file:line`` and the row count to pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.isa import Instruction
from patton.sim.schedule import TimedCommand
from patton.tb.toolchain import estimate

__all__ = ["DEFAULT_ROWS", "RowsError", "fill_payloads", "suggest_rows", "check_trace_rows",
           "check_schedule_rows"]

#: Rows per bank of the RTL build unless ``--rows`` says otherwise (the regression tests' build).
DEFAULT_ROWS = 64


class RowsError(ValueError):
    """The trace or schedule addresses a row the RTL build does not have."""


def fill_payloads(program: Sequence[Instruction], seed: int) -> int:
    """Give every write without ``data=`` random bfloat16 words; return how many were filled.

    Payloads follow the ``data=`` extension: 16 words per 32 B column, ``opsize`` columns for
    WR_GB and one column otherwise. Values are normal-distributed floats truncated to bfloat16
    (no subnormals, infinities or NaNs); an instruction's own payload is kept.
    """
    rng = np.random.default_rng(seed)
    filled = 0
    for ins in program:
        if ins.opcode.info.payload is None or ins.data is not None:
            continue
        columns = ins.opcode.info.payload or ins.columns
        values = rng.standard_normal(columns * DEVICE.lanes).astype(np.float32)
        ins.data = (values.view(np.uint32) >> 16).astype(np.uint16)
        filled += 1
    return filled


def suggest_rows(row: int) -> int:
    """Row count to suggest for a row address: a power of two, at least the default."""
    return max(DEFAULT_ROWS, 1 << row.bit_length())


def _new_build() -> str:
    """What passing a new row count costs, said (:func:`patton.tb.toolchain.estimate`)."""
    return f"a new row count is a new Verilator build the first time: {estimate('channel')}"


def check_trace_rows(program: Sequence[Instruction], rows: int, source: str) -> None:
    for ins in program:
        if ins.row is not None and ins.row >= rows:
            raise RowsError(f"{source}:{ins.line}: {ins.opcode.value} touches row {ins.row}, but "
                            f"the RTL channel is built with --rows {rows} (rows 0..{rows - 1}); "
                            f"pass --rows {suggest_rows(ins.row)} ({_new_build()})")


def check_schedule_rows(commands: Sequence[TimedCommand], rows: int, source: str) -> None:
    """Refuse a normal row beyond the build's ``rows``; the AF LUT rows (``AF_ROW_BASE + k``)
    exist in every build, behind its normal rows."""
    for cmd in commands:
        if rows <= cmd.row < AF_ROW_BASE:
            raise RowsError(f"{source}:{cmd.line}: {cmd.command.name} addresses row {cmd.row}, "
                            f"but the RTL channel is built with --rows {rows} "
                            f"(rows 0..{rows - 1}); pass --rows {suggest_rows(cmd.row)} "
                            f"({_new_build()})")
