"""Shapes of the RTL channel's ports: the command opcode, command, read data and violations.

The opcode enum is built from :class:`patton.sim.isa.Command` (same names, same values), so the
RTL decodes exactly the ISA the models use.

The command port also carries ``broadcast`` and ``ewmul_bg``, the CFR BROADCAST and EWMUL_BG
values in effect when the command was issued (:class:`patton.sim.isa.Cfr`). The device sets its
CFRs by mode-register writes, which the public simulator (and so our schedules) does not issue
as DRAM commands; each schedule entry carries the CFR state it was issued under instead, and a
testbench packs it here. (CFR AFM needs no field: AF16 evaluates whichever LUT row is open.)

Rows: the activation-function LUT rows (``sim.device.AF_ROW_BASE + k``, ``k`` below
``sim.protocol.LUT_ROWS``) do not fit the 16-bit row field; the port names them with ``lut = 1``
and ``row = k``. ``lut = 0`` names the normal row ``row``.
"""

from __future__ import annotations

import types

from amaranth.hdl import unsigned
from amaranth.lib import data, enum
from patton.hw.params import ChannelParams
from patton.sim.isa import (
    ALL_ROWS_COMMANDS,
    BANK_ROW_COMMANDS,
    REG_MODE_COMMANDS,
    Command,
)
from patton.sim.timing import TIMING

__all__ = [
    "Opcode", "ProtocolCode", "IMPLEMENTED", "REJECTED", "REG_MODE", "BANK_ROW", "ALL_ROWS",
    "BANKED", "BANK_BITS", "ROW_BITS", "COL_BITS", "RULE_BITS", "RULES",
    "command_layout", "read_layout", "violation_layout",
]


def _members(namespace: dict) -> None:
    for command in Command:
        namespace[command.name] = command.value


#: Command ids on the command port: :class:`patton.sim.isa.Command`, as an Amaranth enum.
Opcode = types.new_class("Opcode", (enum.Enum,), {"shape": 5}, _members)
Opcode.__doc__ = "Command id on the command port (the values of ``patton.sim.isa.Command``)."
Opcode.__module__ = __name__

#: Commands this version executes.
IMPLEMENTED = frozenset({
    Command.ACT, Command.ACT16, Command.PRE, Command.PREA, Command.RD, Command.WR,
    Command.MAC, Command.MAC16, Command.RDCP, Command.WRCP, Command.WRGB, Command.WRMAC16,
    Command.RDMAC16, Command.WRA16, Command.TMOD, Command.EWMUL16, Command.AF16,
    Command.RDAF16,
})
#: Commands rejected with a protocol error (everything else in the ISA).
REJECTED = frozenset(Command) - IMPLEMENTED
#: Commands that need the register mode TMOD toggles; all others need normal mode.
REG_MODE = REG_MODE_COMMANDS
#: Single-bank column commands: the bank must be open, on the row the command names.
BANK_ROW = BANK_ROW_COMMANDS & IMPLEMENTED
#: All-bank column commands: every bank must be open on the row the command names.
ALL_ROWS = ALL_ROWS_COMMANDS & IMPLEMENTED
#: Commands that address one bank (timing rules of the bank group and bank levels apply).
BANKED = frozenset({Command.ACT, Command.PRE}) | BANK_ROW

#: Widths of the command port's address fields. They are wider than any legal address, so that
#: out-of-range addresses reach the checker instead of wrapping.
BANK_BITS = 5
ROW_BITS = 16
COL_BITS = 8
#: Timing rules of the table (rule ``i`` is bit ``i`` of a violation's rule mask).
RULES = len(TIMING.rules)
RULE_BITS = max(1, (RULES - 1).bit_length())


class ProtocolCode(enum.Enum, shape=4):
    """Why a command was refused (the command is then not executed)."""

    NONE = 0
    REJECTED = 1  # not implemented in this version (RDA, WRA, ACT4, PRE4, refresh, ...)
    MODE = 2  # wrong register mode (TMOD toggles it)
    RANGE = 3  # bank, row or column out of range
    BANK_OPEN = 4  # ACT to a bank open on another row
    ROW_CONFLICT = 5  # ACT16 while a bank has another row open
    BANK_CLOSED = 6  # column command to a closed bank
    WRONG_ROW = 7  # column command to a row other than the open one
    NOT_ALL_OPEN = 8  # all-bank command without the same row open in all banks
    PARTNER = 9  # MAC under BROADCAST = 1 without its partner bank b ^ 1 open on the row
    LUT_ROW = 10  # AF16 while the row open in every bank is not a LUT row


def command_layout(params: ChannelParams) -> data.StructLayout:
    """Return the layout of one command on the command port."""
    return data.StructLayout({
        "valid": unsigned(1),  # a command is issued this cycle
        "command": Opcode,  # which one
        "bank": unsigned(BANK_BITS),  # bank (single-bank commands)
        "row": unsigned(ROW_BITS),  # row (ACT, ACT16, and the row a column command expects)
        "col": unsigned(COL_BITS),  # column (column commands, WRGB, MAC16, WRA16)
        "broadcast": unsigned(1),  # CFR BROADCAST in effect at issue (MAC, MAC16 vector source)
        "ewmul_bg": unsigned(1),  # CFR EWMUL_BG in effect at issue (EWMUL16: 1 all groups)
        "lut": unsigned(1),  # ``row`` is LUT row ``k`` (AF_ROW_BASE + k), not a normal row
        "data": unsigned(params.width),  # write data, lane i in bits [16i+15:16i]
        "mask": unsigned(params.lanes),  # write lane mask (WRMAC16, WRA16: bank mask)
    })


def read_layout(params: ChannelParams) -> data.StructLayout:
    """Return the layout of a read-data output (``rdata`` for RD, ``rdata_mac`` for RDMAC16 and
    RDAF16)."""
    return data.StructLayout({
        "valid": unsigned(1),  # data returns this cycle
        "command": Opcode,  # the command that read it (RD, RDMAC16 or RDAF16)
        "data": unsigned(params.width),  # 16 bfloat16 lanes
    })


def violation_layout() -> data.StructLayout:
    """Return the layout of the violation output."""
    return data.StructLayout({
        "valid": unsigned(1),  # the command on the port this cycle violates something
        "timing": unsigned(1),  # it breaks at least one timing rule
        "protocol": ProtocolCode,  # why it was refused (NONE: executed)
        "command": Opcode,  # the offending command
        "rule": unsigned(RULE_BITS),  # lowest violated timing rule id
        "rules": unsigned(RULES),  # every violated timing rule (bit i = rule i)
    })
