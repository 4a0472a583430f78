"""The AiM instruction set: DRAM-level commands and host-level instructions.

This module is the one definition of the ISA. The controller, the functional model, the trace
reader and writer, the PATTON runtime and the RTL decoder all import it.

Two levels, as the public Ramulator2-based AiM simulator names them:

* :class:`Command` is what a channel controller puts on the command bus (ACT16, MAC16, TMOD ...).
  Each command has a *scope* (the level of the DRAM hierarchy it addresses) and open/close/access
  meta data, as in Ramulator's ``m_command_scopes`` and ``m_command_meta``.
* :class:`Opcode` is a host instruction ("ISR" in that simulator: WR_GB, MAC_ABK, RD_MAC ...),
  plus the host-side trace lines ``R/W MEM``, ``R/W GPR`` and ``W CFR``. :data:`OPCODE_INFO`
  says which fields each one takes, which DRAM command it unrolls into, whether it needs the
  register read/write mode and whether it blocks the AiM DMA.

:class:`Instruction` is one host instruction with its fields. The public trace format cannot say a
start column, a data payload or an element mask; those are optional *extensions* here. Without
them an instruction means exactly what it means to the public simulator.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Command", "Scope", "CommandMeta", "COMMAND_SCOPE", "COMMAND_META",
    "BANK_ROW_COMMANDS", "ALL_ROWS_COMMANDS", "REG_MODE_COMMANDS", "ACTIVATED_BANKS",
    "Opcode", "Field", "OpcodeInfo", "OPCODE_INFO", "Cfr", "Instruction",
    "channel_bit", "mask_channels",
]


class Scope(enum.IntEnum):
    """Level of the DRAM hierarchy a command addresses (Ramulator's ``m_levels``)."""

    CHANNEL = 0
    BANKGROUP = 1
    BANK = 2
    ROW = 3
    COLUMN = 4


class Command(enum.IntEnum):
    """DRAM-level commands of a GDDR6-AiM channel (names as the public simulator uses them)."""

    ACT = 0
    PREA = 1
    PRE = 2
    RD = 3
    WR = 4
    RDA = 5
    WRA = 6
    REFab = 7
    REFpb = 8
    ACT4 = 9
    ACT16 = 10
    PRE4 = 11
    MAC = 12
    MAC16 = 13
    AF16 = 14
    EWMUL16 = 15
    RDCP = 16
    WRCP = 17
    WRGB = 18
    RDMAC16 = 19
    RDAF16 = 20
    WRMAC16 = 21
    WRA16 = 22
    TMOD = 23
    SYNC = 24
    EOC = 25
    #: Extension ``wr16`` (:mod:`patton.sim.extensions`): an all-bank write without
    #: auto-precharge. Refused by every device without the extension.
    WR16 = 26


@dataclass(frozen=True, slots=True)
class CommandMeta:
    """What a command does to row state (Ramulator's ``DRAMCommandMeta``)."""

    opening: bool  # opens a row
    closing: bool  # closes a row (explicitly or by auto-precharge)
    access: bool  # moves column data


#: Bank rows one activation command opens (a row activation of each bank it opens counts).
ACTIVATED_BANKS: dict[Command, int] = {Command.ACT: 1, Command.ACT4: 4, Command.ACT16: 16}

COMMAND_SCOPE: dict[Command, Scope] = {
    Command.REFab: Scope.CHANNEL, Command.REFpb: Scope.BANK,
    Command.ACT16: Scope.CHANNEL, Command.ACT4: Scope.BANKGROUP, Command.ACT: Scope.ROW,
    Command.PREA: Scope.CHANNEL, Command.PRE4: Scope.BANKGROUP, Command.PRE: Scope.BANK,
    Command.RD: Scope.COLUMN, Command.WR: Scope.COLUMN,
    Command.RDA: Scope.COLUMN, Command.WRA: Scope.COLUMN,
    Command.MAC: Scope.COLUMN, Command.MAC16: Scope.CHANNEL,
    Command.AF16: Scope.CHANNEL, Command.EWMUL16: Scope.CHANNEL,
    Command.RDCP: Scope.COLUMN, Command.WRCP: Scope.COLUMN,
    Command.WRGB: Scope.CHANNEL, Command.RDMAC16: Scope.CHANNEL,
    Command.RDAF16: Scope.CHANNEL, Command.WRMAC16: Scope.CHANNEL,
    Command.WRA16: Scope.CHANNEL, Command.TMOD: Scope.CHANNEL,
    Command.SYNC: Scope.CHANNEL, Command.EOC: Scope.CHANNEL,
    Command.WR16: Scope.CHANNEL,
}

_M = CommandMeta
COMMAND_META: dict[Command, CommandMeta] = {
    Command.ACT: _M(True, False, False), Command.ACT4: _M(True, False, False),
    Command.ACT16: _M(True, False, False),
    Command.PREA: _M(False, True, False), Command.PRE: _M(False, True, False),
    Command.PRE4: _M(False, True, False),
    Command.RD: _M(False, False, True), Command.WR: _M(False, False, True),
    Command.RDA: _M(False, True, True), Command.WRA: _M(False, True, True),
    Command.REFab: _M(False, False, False), Command.REFpb: _M(False, False, False),
    Command.MAC: _M(False, False, True), Command.MAC16: _M(False, False, True),
    Command.AF16: _M(False, False, False), Command.EWMUL16: _M(False, False, True),
    Command.RDCP: _M(False, False, True), Command.WRCP: _M(False, False, True),
    Command.WRGB: _M(False, False, False), Command.RDMAC16: _M(False, False, False),
    Command.RDAF16: _M(False, False, False), Command.WRMAC16: _M(False, False, False),
    Command.WRA16: _M(False, True, True),
    Command.TMOD: _M(False, False, False), Command.SYNC: _M(False, False, False),
    Command.EOC: _M(False, False, False),
    Command.WR16: _M(False, False, True),
}
del _M

#: Single-bank column commands: their bank must be open on their row (else PRE/ACT first).
BANK_ROW_COMMANDS = frozenset({Command.RD, Command.WR, Command.RDA, Command.WRA, Command.MAC,
                               Command.RDCP, Command.WRCP})
#: All-bank commands: every bank must be open on their row (else PREA/ACT16 first).
ALL_ROWS_COMMANDS = frozenset({Command.MAC16, Command.EWMUL16, Command.AF16, Command.WRA16,
                               Command.WR16})
#: Commands that need the register read/write mode (TMOD toggles it); all others need normal.
REG_MODE_COMMANDS = frozenset({Command.WRGB, Command.WRMAC16, Command.RDMAC16,
                               Command.RDAF16})


class Field(enum.Enum):
    """Positional fields of an ``AiM`` trace line, in the fixed order the public format uses."""

    OPSIZE = "opsize"
    GPR0 = "gpr0"
    GPR1 = "gpr1"
    CHANNEL_MASK = "channel_mask"
    BANK = "bank"
    ROW = "row"


class Opcode(enum.Enum):
    """Host instructions: the AiM ISRs and the host-side trace lines."""

    WR_SBK = "WR_SBK"
    WR_GB = "WR_GB"
    WR_BIAS = "WR_BIAS"
    WR_AFLUT = "WR_AFLUT"
    RD_MAC = "RD_MAC"
    RD_AF = "RD_AF"
    RD_SBK = "RD_SBK"
    COPY_BKGB = "COPY_BKGB"
    COPY_GBBK = "COPY_GBBK"
    MAC_SBK = "MAC_SBK"
    MAC_ABK = "MAC_ABK"
    AF = "AF"
    EWMUL = "EWMUL"
    EWADD = "EWADD"
    WR_ABK = "WR_ABK"
    EOC = "EOC"
    SYNC = "SYNC"
    # Host-side lines (``R MEM``, ``W MEM``, ``R GPR``, ``W GPR``, ``W CFR``).
    RD_MEM = "R MEM"
    WR_MEM = "W MEM"
    RD_GPR = "R GPR"
    WR_GPR = "W GPR"
    WR_CFR = "W CFR"
    #: Extension ``wr16``: WR_ABK that leaves the row open (one WR16; refused without it).
    WR_ABK_OPEN = "WR_ABK_OPEN"

    @property
    def info(self) -> OpcodeInfo:
        """The static facts about this opcode."""
        return OPCODE_INFO[self]

    @property
    def is_aim(self) -> bool:
        """True for an ``AiM`` line, false for a host-side ``R/W MEM|GPR|CFR`` line."""
        return self not in _HOST_LINES


_HOST_LINES = frozenset({Opcode.RD_MEM, Opcode.WR_MEM, Opcode.RD_GPR, Opcode.WR_GPR,
                         Opcode.WR_CFR})


@dataclass(frozen=True, slots=True)
class OpcodeInfo:
    """Static facts about one host instruction (the public simulator's ``AiMISR``).

    ``final`` is the DRAM command each unrolled per-column request ends with; ``None`` means the
    instruction issues nothing to DRAM (EWADD, GPR and CFR lines). ``conventional`` marks requests
    that the controller schedules as ordinary reads/writes (FR-FCFS), not in AiM order.
    """

    fields: tuple[Field, ...]  # positional trace fields, in order
    final: Command | None  # DRAM command per unrolled column request
    reg_mode: bool = False  # needs the register read/write mode (TMOD on change)
    blocking: bool = False  # stalls the AiM DMA until every channel calls back
    one_channel: bool = False  # the channel mask must name exactly one channel
    conventional: bool = False  # scheduled as an ordinary read/write
    columns: bool = False  # opsize counts 32 B columns starting at ``col``
    reader: bool = False  # completion goes through the read-return path
    payload: int | None = None  # payload columns it may carry (0: ``opsize``), None: none
    maskable: bool = False  # may carry a 16-bit lane mask (``mask=``)
    addressed: bool = False  # may carry a start column (``col=``)

    def payload_words(self, columns: int, lanes: int) -> int:
        """Return the payload size in words for an instruction of ``columns`` columns."""
        if self.payload is None:
            raise ValueError("this instruction carries no payload")
        return (self.payload or columns) * lanes


_F = Field
OPCODE_INFO: dict[Opcode, OpcodeInfo] = {
    Opcode.WR_SBK: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK, _F.BANK, _F.ROW), Command.WR,
                              conventional=True, columns=True, payload=1, maskable=True,
                              addressed=True),
    Opcode.RD_SBK: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK, _F.BANK, _F.ROW), Command.RD,
                              conventional=True, columns=True, reader=True, addressed=True),
    Opcode.WR_ABK: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK, _F.ROW), Command.WRA16,
                              one_channel=True, columns=True, payload=1, maskable=True,
                              addressed=True),
    Opcode.WR_ABK_OPEN: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK, _F.ROW), Command.WR16,
                                   one_channel=True, columns=True, payload=1, maskable=True,
                                   addressed=True),
    Opcode.WR_GB: OpcodeInfo((_F.OPSIZE, _F.GPR0, _F.CHANNEL_MASK), Command.WRGB,
                             reg_mode=True, columns=True, payload=0, maskable=True,
                             addressed=True),
    Opcode.WR_BIAS: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK), Command.WRMAC16, reg_mode=True,
                               payload=1),
    Opcode.WR_AFLUT: OpcodeInfo((_F.OPSIZE,), None),
    Opcode.RD_MAC: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK), Command.RDMAC16, reg_mode=True,
                              blocking=True, reader=True),
    Opcode.RD_AF: OpcodeInfo((_F.GPR0, _F.CHANNEL_MASK), Command.RDAF16, reg_mode=True,
                             blocking=True, reader=True),
    Opcode.COPY_BKGB: OpcodeInfo((_F.OPSIZE, _F.CHANNEL_MASK, _F.BANK, _F.ROW), Command.RDCP,
                                 columns=True, addressed=True),
    Opcode.COPY_GBBK: OpcodeInfo((_F.OPSIZE, _F.CHANNEL_MASK, _F.BANK, _F.ROW), Command.WRCP,
                                 columns=True, addressed=True),
    Opcode.MAC_SBK: OpcodeInfo((_F.OPSIZE, _F.CHANNEL_MASK, _F.BANK, _F.ROW), Command.MAC,
                               columns=True, addressed=True),
    Opcode.MAC_ABK: OpcodeInfo((_F.OPSIZE, _F.CHANNEL_MASK, _F.ROW), Command.MAC16,
                               columns=True, addressed=True),
    Opcode.AF: OpcodeInfo((_F.CHANNEL_MASK,), Command.AF16),
    Opcode.EWMUL: OpcodeInfo((_F.OPSIZE, _F.CHANNEL_MASK, _F.ROW), Command.EWMUL16,
                             columns=True, addressed=True),
    Opcode.EWADD: OpcodeInfo((_F.OPSIZE, _F.GPR0, _F.GPR1), None),
    Opcode.SYNC: OpcodeInfo((), Command.SYNC, blocking=True, reader=True),
    Opcode.EOC: OpcodeInfo((), Command.EOC, blocking=True, reader=True),
    Opcode.RD_MEM: OpcodeInfo((), Command.RD, conventional=True, reader=True, addressed=True),
    Opcode.WR_MEM: OpcodeInfo((), Command.WR, conventional=True, payload=1, maskable=True,
                              addressed=True),
    Opcode.RD_GPR: OpcodeInfo((), None),
    Opcode.WR_GPR: OpcodeInfo((), None, payload=1),
    Opcode.WR_CFR: OpcodeInfo((), None),
}
del _F


class Cfr(enum.IntEnum):
    """Configuration registers set by ``W CFR <id> <value>``."""

    BROADCAST = 0  # MAC vector operand: 0 = global buffer, 1 = neighbouring bank
    EWMUL_BG = 1  # EWMUL in one bank group (0) or in all bank groups (1)
    AFM = 2  # activation-function mode (LUT row 2**29 + AFM)


#: Reset values of the configuration registers (the public simulator's).
CFR_RESET: dict[Cfr, int] = {Cfr.BROADCAST: 0, Cfr.EWMUL_BG: 1, Cfr.AFM: 0}
#: Legal value range (inclusive) of each configuration register.
CFR_RANGE: dict[Cfr, tuple[int, int]] = {Cfr.BROADCAST: (0, 1), Cfr.EWMUL_BG: (0, 1),
                                          Cfr.AFM: (0, 7)}

#: Width of the channel mask; bit ``31 - c`` selects channel ``c``.
MASK_BITS = 32


def channel_bit(channel: int) -> int:
    """Return the channel-mask bit that selects ``channel`` (MSB first: ``1 << 31`` is 0)."""
    return 1 << (MASK_BITS - 1 - channel)


def mask_channels(mask: int) -> list[int]:
    """Return the channels a mask selects, in the order the public simulator sends to them.

    That simulator scans from bit 0 upwards, i.e. from channel 31 down to channel 0.
    """
    return [MASK_BITS - 1 - bit for bit in range(MASK_BITS) if mask >> bit & 1]


@dataclass(slots=True)
class Instruction:
    """One host instruction, as a trace line states it.

    Invariants (checked by :func:`patton.sim.trace.validate`): exactly the fields of
    ``opcode.info.fields`` are set (others stay ``None``), ``channel_mask`` is a non-zero 32-bit
    mask, and for ``R/W MEM`` lines ``channel`` holds a channel *index*.

    Extensions (``None`` / ``0`` means "as the public simulator"): ``col`` is the start column of
    a column-unrolled instruction; ``data`` is the payload as bfloat16 bit patterns, 16 per
    32 B column (``opsize`` columns for WR_GB, one column otherwise); ``mask`` is a 16-bit element
    mask for writes (bit ``i`` enables lane ``i``).

    Args:
        opcode: what to do.
        opsize: number of 32 B columns (column instructions) or GPR words (EWADD).
        gpr0, gpr1: GPR ids.
        channel_mask: channel mask, bit ``31 - c`` selects channel ``c``.
        bank: bank index 0..15.
        row: row address.
        channel: channel index (``R/W MEM``).
        gpr: GPR id (``R/W GPR``).
        cfr, value: configuration register and value (``W CFR``).
        col: start column (extension).
        data: payload (extension).
        mask: element write mask (extension).
        line: 1-based line number in the trace it came from (0 if built in code).
    """

    opcode: Opcode
    opsize: int | None = None
    gpr0: int | None = None
    gpr1: int | None = None
    channel_mask: int | None = None
    bank: int | None = None
    row: int | None = None
    channel: int | None = None
    gpr: int | None = None
    cfr: int | None = None
    value: int | None = None
    col: int | None = None
    data: np.ndarray | None = field(default=None, compare=False)
    mask: int | None = None
    line: int = field(default=0, compare=False)

    @property
    def columns(self) -> int:
        """Number of per-column requests the instruction unrolls into (1 unless opsize says)."""
        if self.opcode.info.columns and self.opsize is not None:
            return self.opsize
        return 1

    @property
    def start_col(self) -> int:
        """First column addressed (0 unless the ``col`` extension says otherwise)."""
        return 0 if self.col is None else self.col

    def channels(self) -> list[int]:
        """Return the channels this instruction goes to, in the simulator's send order."""
        if self.opcode in (Opcode.RD_MEM, Opcode.WR_MEM):
            assert self.channel is not None
            return [self.channel]
        if self.channel_mask is None:
            return []
        return mask_channels(self.channel_mask)

    def same(self, other: Instruction) -> bool:
        """Return True when both instructions are equal, payloads included."""
        if self != other:
            return False
        if (self.data is None) != (other.data is None):
            return False
        return self.data is None or bool(np.array_equal(self.data, other.data))
