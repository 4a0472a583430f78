"""Shapes of the RTL channel's ports: the command opcode, command, read data and violations.

The opcode enum is built from :class:`patton.sim.isa.Command` (same names, same values), so the
RTL decodes exactly the ISA the models use: the commands of one *device extension set*
(:func:`hw_isa`; ``aim``, the default, has the 26 commands of the public simulator's device,
``aim+wr16`` adds WR16). A channel takes its set from its timing table (``timing.ext``); the
module-level names below are the ``aim`` set's, so the default RTL is the one it always was.

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
from dataclasses import dataclass
from functools import cache

from amaranth.hdl import unsigned
from amaranth.lib import data, enum
from patton.hw.params import ChannelParams
from patton.sim.isa import (
    ALL_ROWS_COMMANDS,
    BANK_ROW_COMMANDS,
    REG_MODE_COMMANDS,
    Command,
)
from patton.sim.timing import SLOTS, TIMING, timing_table

__all__ = [
    "Opcode", "ProtocolCode", "IMPLEMENTED", "REJECTED", "REG_MODE", "BANK_ROW", "ALL_ROWS",
    "BANKED", "BANK_BITS", "ROW_BITS", "COL_BITS", "RULE_BITS", "RULES",
    "command_layout", "read_layout", "violation_layout", "HwIsa", "hw_isa",
]

#: Commands this version executes of the ``aim`` set (every set executes these; an extension
#: set's own commands are executed too).
_BASE_IMPLEMENTED = frozenset({
    Command.ACT, Command.ACT16, Command.PRE, Command.PREA, Command.RD, Command.WR,
    Command.MAC, Command.MAC16, Command.RDCP, Command.WRCP, Command.WRGB, Command.WRMAC16,
    Command.RDMAC16, Command.WRA16, Command.TMOD, Command.EWMUL16, Command.AF16,
    Command.RDAF16,
})
#: Commands that need the register mode TMOD toggles; all others need normal mode.
REG_MODE = REG_MODE_COMMANDS

#: Widths of the command port's address fields. They are wider than any legal address, so that
#: out-of-range addresses reach the checker instead of wrapping.
BANK_BITS = 5
ROW_BITS = 16
COL_BITS = 8


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


@dataclass(frozen=True, eq=False)
class HwIsa:
    """The RTL's ISA on one device extension set: what the command port carries and decodes.

    Members:
        ext: the extension set's name.
        commands: the set's commands, in value order (``aim``: the 26 of the public
            simulator's device; an extension appends its own, values 26 and up).
        Opcode: the command port's 5-bit Amaranth enum of ``commands`` (same names, same
            values; the class is called ``Opcode`` in every set, which the Verilog prints).
        IMPLEMENTED: the commands this version executes (an extension's commands included).
        REJECTED: the set's other commands, refused with a protocol error.
        BANK_ROW: single-bank column commands: the bank must be open, on the command's row.
        ALL_ROWS: all-bank column commands: every bank open on the command's row.
        BANKED: commands that address one bank (bank-group and bank timing rules apply).
        RULES: rule-mask width (bit ``i`` is rule ``i``): the timing table's slots.
        RULE_BITS: width of a rule id.

    Invariant: ``hw_isa("aim")`` is exactly the ISA the RTL had before extensions existed
    (same enum members, sets and widths), so the default Verilog does not change.
    """

    ext: str
    commands: tuple[Command, ...]
    Opcode: type
    IMPLEMENTED: frozenset[Command]
    REJECTED: frozenset[Command]
    BANK_ROW: frozenset[Command]
    ALL_ROWS: frozenset[Command]
    BANKED: frozenset[Command]
    RULES: int
    RULE_BITS: int

    def command_layout(self, params: ChannelParams) -> data.StructLayout:
        """Return the layout of one command on the command port."""
        return data.StructLayout({
            "valid": unsigned(1),  # a command is issued this cycle
            "command": self.Opcode,  # which one
            "bank": unsigned(BANK_BITS),  # bank (single-bank commands)
            "row": unsigned(ROW_BITS),  # row (ACT, ACT16, and the row a column command expects)
            "col": unsigned(COL_BITS),  # column (column commands, WRGB, MAC16, WRA16)
            "broadcast": unsigned(1),  # CFR BROADCAST in effect at issue (MAC, MAC16 source)
            "ewmul_bg": unsigned(1),  # CFR EWMUL_BG in effect at issue (EWMUL16: 1 all groups)
            "lut": unsigned(1),  # ``row`` is LUT row ``k`` (AF_ROW_BASE + k), not a normal row
            "data": unsigned(params.width),  # write data, lane i in bits [16i+15:16i]
            "mask": unsigned(params.lanes),  # write lane mask (WRMAC16, WRA16: bank mask)
        })

    def read_layout(self, params: ChannelParams) -> data.StructLayout:
        """Return the layout of a read-data output (``rdata`` for RD, ``rdata_mac`` for
        RDMAC16 and RDAF16)."""
        return data.StructLayout({
            "valid": unsigned(1),  # data returns this cycle
            "command": self.Opcode,  # the command that read it (RD, RDMAC16 or RDAF16)
            "data": unsigned(params.width),  # 16 bfloat16 lanes
        })

    def violation_layout(self) -> data.StructLayout:
        """Return the layout of the violation output."""
        return data.StructLayout({
            "valid": unsigned(1),  # the command on the port this cycle violates something
            "timing": unsigned(1),  # it breaks at least one timing rule
            "protocol": ProtocolCode,  # why it was refused (NONE: executed)
            "command": self.Opcode,  # the offending command
            "rule": unsigned(self.RULE_BITS),  # lowest violated timing rule id
            "rules": unsigned(self.RULES),  # every violated timing rule (bit i = rule i)
        })


def hw_isa(ext: str | None = None, slots: int = SLOTS) -> HwIsa:
    """Return the RTL's ISA on extension set ``ext`` (``None``: ``aim``) with a ``slots``-bit
    rule mask: one object per set and width in a process, so its ``Opcode`` is one class (a
    channel passes its table's ``timing.ext`` and ``timing.slots``).

    The set's commands are those of its timing tables (:attr:`TimingTable.commands
    <patton.sim.timing.TimingTable.commands>`); the commands an extension adds to ``aim``'s are
    implemented, so ``REJECTED`` is the same on every set.

    Raises:
        UnknownExtensionError: ``ext`` is not an extension set (the message lists them).
        ValueError: ``slots`` is below the profiles' :data:`~patton.sim.timing.SLOTS`.
    """
    if not isinstance(slots, int) or slots < SLOTS:
        raise ValueError(f"a rule mask of {slots!r} bits is narrower than the profiles' "
                         f"{SLOTS} slots")
    return _hw_isa(timing_table(None, ext).ext, slots)


@cache
def _hw_isa(ext: str, slots: int) -> HwIsa:
    table = timing_table(None, ext)
    commands = tuple(table.commands)
    added = frozenset(commands) - frozenset(TIMING.commands)  # the extension's own

    def members(namespace: dict) -> None:
        for command in commands:
            namespace[command.name] = command.value

    opcode = types.new_class("Opcode", (enum.Enum,), {"shape": 5}, members)
    opcode.__doc__ = "Command id on the command port (the values of ``patton.sim.isa.Command``)."
    opcode.__module__ = __name__
    implemented = _BASE_IMPLEMENTED | added
    bank_row = BANK_ROW_COMMANDS & implemented
    return HwIsa(
        ext=table.ext, commands=commands, Opcode=opcode, IMPLEMENTED=implemented,
        REJECTED=frozenset(commands) - implemented, BANK_ROW=bank_row,
        ALL_ROWS=ALL_ROWS_COMMANDS & implemented,
        BANKED=frozenset({Command.ACT, Command.PRE}) | bank_row,
        RULES=slots, RULE_BITS=max(1, (slots - 1).bit_length()))


#: The default device's ISA (extension set ``aim``): what every name below is bound to.
_AIM = hw_isa()

#: Command ids on the command port: :class:`patton.sim.isa.Command`, as an Amaranth enum.
Opcode = _AIM.Opcode
#: Commands this version executes.
IMPLEMENTED = _AIM.IMPLEMENTED
#: Commands rejected with a protocol error (everything else in the ISA).
REJECTED = _AIM.REJECTED
#: Single-bank column commands: the bank must be open, on the row the command names.
BANK_ROW = _AIM.BANK_ROW
#: All-bank column commands: every bank must be open on the row the command names.
ALL_ROWS = _AIM.ALL_ROWS
#: Commands that address one bank (timing rules of the bank group and bank levels apply).
BANKED = _AIM.BANKED
#: Timing rules of the table (rule ``i`` is bit ``i`` of a violation's rule mask).
RULES = _AIM.RULES
RULE_BITS = _AIM.RULE_BITS


def command_layout(params: ChannelParams) -> data.StructLayout:
    """Return the layout of one command on the command port (``aim``)."""
    return _AIM.command_layout(params)


def read_layout(params: ChannelParams) -> data.StructLayout:
    """Return the layout of a read-data output (``rdata`` for RD, ``rdata_mac`` for RDMAC16 and
    RDAF16; ``aim``)."""
    return _AIM.read_layout(params)


def violation_layout() -> data.StructLayout:
    """Return the layout of the violation output (``aim``)."""
    return _AIM.violation_layout()
