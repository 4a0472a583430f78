"""NumPy functional model of an AiM device: what every command does to the values.

The model executes DRAM-level commands (:meth:`FunctionalModel.execute`) and, for convenience,
host instructions (:meth:`FunctionalModel.run`), with the numerics of :mod:`patton.sim.datapath`.
It has no notion of time: the controller and cycle model decide *when*; this model decides *what*.

State per channel (:class:`ChannelState`): the open row of each bank, the DRAM mats (sparse: a
row exists only once written), the 2 KB global buffer, one binary32 MAC accumulator and one
bfloat16 AF result register per bank, and the configuration registers. The host side holds the
GPRs (:attr:`FunctionalModel.gprs`).

Semantic decisions (written down in ``docs/numerics.md`` §5):

* ``MAC``/``MAC16`` with CFR BROADCAST = 1 take the vector from the partner bank ``b ^ 1`` (same
  row, same column), as the public simulator's "next bank" wording for pairs (0, 1), (2, 3)...;
  ``MAC16`` then updates the even banks only ("half of the banks"), the odd banks' accumulators
  stay as they are.
* ``EWMUL16`` writes ``bank[4g+2][row][col] = bank[4g][row][col] * bank[4g+1][row][col]``
  element-wise, for every bank group ``g`` when CFR EWMUL_BG = 1 (its reset value) and for bank
  group 0 only when it is 0 (the meaning :class:`patton.sim.isa.Cfr` documents).
* ``WRA16`` scatters its 16 words: bank ``b`` receives word ``b`` in every lane the mask enables
  (all lanes without a mask) of column ``col`` of the open row; then all banks close. With a
  one-lane mask it appends one token of a dimension-major Value cache (16 dimensions, one per
  bank) in a single command. ``WR16`` (extension ``wr16``) writes the same and leaves the row
  open.
* ``AF16`` needs one LUT row (``AF_ROW_BASE + afm``) open in every bank; bank ``b`` evaluates
  its own accumulator through the LUT in its own copy of the open row. CFR AFM only tells
  :meth:`FunctionalModel.run` (the controller) which row to open. Unwritten LUT rows read as the
  built-in table of :func:`patton.sim.datapath.af_lut`; ordinary writes may replace them.
* Host writes (``WR``, ``WRA``, ``WRGB``, ``WRA16``, ``WR16``, ``WRMAC16``) honour a 16-bit
  mask: bit ``i`` enables lane ``i`` (for ``WRMAC16``: bank ``i``). Reads of unwritten memory
  return zeros.
* ``RDMAC16`` reads the accumulators without clearing them (``WRMAC16`` re-initialises them).
* Legality comes from the one protocol definition, :data:`patton.sim.protocol.RULES`, which
  :func:`patton.sim.check.verify` applies to schedules too (``docs/protocol.md``): ``execute``
  calls ``State.check`` and raises :class:`ProtocolError` with its reason, computes the values,
  then calls ``State.apply``. In short: ``ACT``/``ACT4``/``ACT16`` may target a bank that
  already has the same row open (a no-op for that bank; the public simulator's controller
  issues ACT16 when only some banks are open on the row), a bank open on another row must be
  precharged first; ACT4/PRE4 act on the named bank's group; RDA/WRA close their bank, WRA16
  all banks; REFab/REFpb need their banks precharged; AF16 needs a LUT row open.
* Register mode: TMOD always toggles it, but only ``FunctionalModel(modes=True)`` enforces it
  (WRGB, WRMAC16, RDMAC16, RDAF16 in register mode, all else but TMOD/SYNC/EOC in normal
  mode), and then
  :meth:`FunctionalModel.run` issues TMODs as the controller does. By default no command needs
  a mode: host code and tests call ``execute`` without TMODs, and :func:`patton.sim.replay.replay`
  skips the schedule's TMODs. Value-level checks (payload shape, mask width, device
  organisation limits) stay here; the protocol does not see payloads.

Invariants: a command that raises :class:`ProtocolError` leaves the whole model unchanged; only
a write that changes a never-written row allocates memory (32 KiB: the row in all 16 banks).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from patton.sim import datapath as dp
from patton.sim import protocol
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.isa import (
    ALL_ROWS_COMMANDS,
    BANK_ROW_COMMANDS,
    CFR_RANGE,
    CFR_RESET,
    REG_MODE_COMMANDS,
    Cfr,
    Command,
    Instruction,
    Opcode,
)
from patton.sim.program import Readout
from patton.sim.protocol import CLOSED, COLUMN, LUT_ROWS, PAYLOAD, RULES, Need, Targets

__all__ = ["ProtocolError", "ChannelState", "FunctionalModel"]


class ProtocolError(Exception):
    """A command that the device cannot execute in its current state, or with these arguments.

    Raised before any state changes.
    """


@dataclass(slots=True)
class ChannelState:
    """Architectural state of one channel.

    Invariants: ``protocol`` holds the open row of each bank (``-1`` closed, else a legal row)
    and the register mode, and only changes through :mod:`patton.sim.protocol`; ``mats[row]``
    has shape ``(banks, columns, lanes)`` and exists only for rows that a command or
    :meth:`FunctionalModel.poke` wrote; ``acc`` never holds a binary32 subnormal.
    """

    protocol: protocol.State  # open row per bank and register mode
    gb: np.ndarray  # (gb_columns, lanes) uint16, the global buffer
    acc: np.ndarray  # (banks,) uint32, binary32 MAC accumulators
    af: np.ndarray  # (banks,) uint16, bfloat16 AF result registers
    cfr: dict[Cfr, int]  # configuration registers
    mats: dict[int, np.ndarray] = field(default_factory=dict)  # row -> (banks, cols, lanes)

    @classmethod
    def reset(cls, device: Device) -> ChannelState:
        """Return the state after power-up: banks closed, normal mode, buffers zero."""
        return cls(protocol=protocol.State(device),
                   gb=np.zeros((device.gb_columns, device.lanes), dtype=np.uint16),
                   acc=np.zeros(device.banks, dtype=np.uint32),
                   af=np.zeros(device.banks, dtype=np.uint16),
                   cfr=dict(CFR_RESET))

    @property
    def open_rows(self) -> np.ndarray:
        """The open row of each bank, ``(banks,)`` int64, -1 = closed (``protocol``'s array;
        writing it bypasses the protocol, as a testbench reset does)."""
        return self.protocol.open_rows


@dataclass(frozen=True, slots=True)
class _Args:
    """Arguments of one legal command (checked by :mod:`patton.sim.protocol`)."""

    bank: int | None  # bank index (bank-level commands)
    row: int | None  # row it opens, or the row open in its bank(s) (access commands)
    col: int | None  # column (commands that take one)
    words: np.ndarray  # (lanes,) uint16 payload (zeros for commands without one)
    lanes: np.ndarray  # (lanes,) bool, lanes the write mask enables


class FunctionalModel:
    """Values-only model of an AiM device with ``device.channels`` channels.

    Args:
        device: organisation (defaults to the public simulator's 32-channel device).
        modes: also enforce the register mode (WRGB, WRMAC16, RDMAC16, RDAF16 need it; every
            other command but TMOD, SYNC and EOC needs normal mode), as the bus does; :meth:`run`
            then issues TMOD before a command of the other mode, as the controller does.
            Without it (the default) TMOD still toggles the mode but no command needs one.

    Attributes:
        device: the organisation.
        modes: whether the register mode is enforced.
        channels: one :class:`ChannelState` per channel.
        gprs: host GPRs by id, 16 bfloat16 bit patterns each; unwritten GPRs read as zero.
    """

    def __init__(self, device: Device = DEVICE, *, modes: bool = False) -> None:
        self.device = device
        self.modes = bool(modes)
        self.channels: list[ChannelState] = [ChannelState.reset(device)
                                             for _ in range(device.channels)]
        self.gprs: dict[int, np.ndarray] = {}
        zeros = np.zeros((device.banks, device.columns, device.lanes), dtype=np.uint16)
        zeros.flags.writeable = False
        self._zeros = zeros
        self._luts: dict[int, np.ndarray] = {}
        self._no_words = np.zeros(device.lanes, dtype=np.uint16)
        self._no_words.flags.writeable = False
        self._all_lanes = np.ones(device.lanes, dtype=bool)
        self._all_lanes.flags.writeable = False
        self._index = -1  # position of the instruction :meth:`run` is executing
        self._handlers = {
            Command.ACT: self._nop, Command.ACT4: self._nop, Command.ACT16: self._nop,
            Command.PRE: self._nop, Command.PRE4: self._nop, Command.PREA: self._nop,
            Command.RD: self._rd, Command.RDA: self._rd,
            Command.WR: self._wr, Command.WRA: self._wr,
            Command.MAC: self._mac, Command.MAC16: self._mac16,
            Command.AF16: self._af16, Command.EWMUL16: self._ewmul16,
            Command.RDCP: self._rdcp, Command.WRCP: self._wrcp,
            Command.WRGB: self._wrgb, Command.WRMAC16: self._wrmac16,
            Command.RDMAC16: self._rdmac16, Command.RDAF16: self._rdaf16,
            Command.WRA16: self._scatter16, Command.WR16: self._scatter16,
            Command.REFab: self._nop, Command.REFpb: self._nop,
            Command.TMOD: self._nop, Command.SYNC: self._nop, Command.EOC: self._nop,
        }

    # ----------------------------------------------------------------------- public API

    def execute(self, channel: int, command: Command, bank: int | None = None,
                row: int | None = None, col: int | None = None,
                data: np.ndarray | None = None, mask: int | None = None) -> np.ndarray | None:
        """Execute one DRAM command on one channel.

        Args:
            channel: channel index.
            command: the command.
            bank: bank index, for bank-level commands (ACT4/PRE4 act on its bank group).
            row: row to open (ACT, ACT4, ACT16); for access commands optional, and when given
                it must equal the open row.
            col: column (32 B unit) for column commands, WRGB and the all-bank accesses.
            data: 16 bfloat16 bit patterns (``uint16`` or ``ml_dtypes.bfloat16``) for writes.
            mask: 16-bit lane mask for writes (``None`` = all lanes).

        Returns:
            16 bfloat16 bit patterns for RD/RDA, RDMAC16 (one per bank) and RDAF16; else None.

        Raises:
            ProtocolError: the command is illegal now (:meth:`patton.sim.protocol.State.check`)
                or its arguments are out of range; the model is unchanged.
        """
        st = self._channel(channel)
        try:
            command = Command(command)
        except ValueError:
            raise ProtocolError(f"unknown command {command!r}") from None
        if command in PAYLOAD:
            words, lanes = self._words(command, data), self._mask(command, mask)
        else:
            words, lanes = self._no_words, self._all_lanes
        state = st.protocol
        problem = state.check(command, bank, row, col, bool(st.cfr[Cfr.BROADCAST]),
                              mode=self.modes)
        if problem:
            raise ProtocolError(problem)
        rule = RULES[command]
        b = int(bank) if rule.bank else None
        if rule.need is Need.OPEN:
            row = int(state.open_rows[b if rule.targets is Targets.BANK else 0])
        elif row is not None:
            row = int(row)
        c = int(col) if rule.columns is not None else None
        result = self._handlers[command](st, command, _Args(b, row, c, words, lanes))
        state.apply(command, b, row)
        return result

    def mac16_run(self, channel: int, row: int | None, cols: Sequence[int]) -> None:
        """Execute MAC16 at each of ``cols`` in turn on ``channel``: what one
        :meth:`execute` per column does, in one vectorised pass (a schedule's MAC16 streams).

        Raises:
            ProtocolError: as :meth:`execute`, for the first column that is illegal; the
                columns before it are executed, that one and the rest are not.
        """
        st = self._channel(channel)
        state = st.protocol
        broadcast = bool(st.cfr[Cfr.BROADCAST])
        done = 0
        problem = None
        for c in cols:  # MAC16 changes no protocol state: each is judged on the same state
            problem = state.check(Command.MAC16, None, row, c, broadcast, mode=self.modes)
            if problem:
                break
            done += 1
        if done:
            open_row = int(state.open_rows[0])
            self._mac_columns([st], open_row, np.asarray(cols[:done], dtype=np.intp))
        if problem:
            raise ProtocolError(problem)

    def run(self, instructions: Iterable[Instruction]) -> list[Readout]:
        """Execute host instructions, opening and closing rows as a controller would.

        Each AiM instruction unrolls into its final DRAM command once per column
        (``start_col .. start_col + columns - 1``), columns outer and channels inner, in the
        order :meth:`Instruction.channels` gives. Before a single-bank access the bank is
        precharged if another row is open and activated; before an all-bank access, PREA if
        any bank has another row open, then ACT16 if any bank is closed (the public
        simulator's prerequisites). ``MAC`` with BROADCAST = 1 opens the row in the partner
        bank too.

        Payloads: a write takes ``Instruction.data`` (16 words per column; ``opsize`` columns
        for WR_GB), else GPR ``gpr0 + i`` for its ``i``-th column (zeros for ``W MEM``). The same
        payload goes to every channel of the mask. A read stores channel ``c``'s data in GPR
        ``gpr0 + k``, ``k`` the rank of ``c`` among the instruction's channels (ascending), and
        appends a :class:`Readout`. ``W CFR`` sets a register in every channel; ``W GPR`` loads
        ``data`` (or zeros); ``R GPR`` reads a GPR out; ``EWADD n g0 g1`` sets
        ``GPR[g0 + i] = GPR[g0 + i] + GPR[g1 + i]`` for ``i < n`` (host bfloat16 add).

        Returns:
            The values read, in execution order.

        Raises:
            ProtocolError: an instruction is malformed (channel, bank, row, column range,
                payload shape, WR_AFLUT). Such an instruction changes nothing; the ones before
                it stay executed.
        """
        out: list[Readout] = []
        for index, inst in enumerate(instructions):
            self._index = index
            self._run(inst, out)
        return out

    def set_cfr(self, cfr: Cfr | int, value: int, channels: Iterable[int] | None = None) -> None:
        """Set a configuration register (in every channel unless ``channels`` says otherwise).

        Raises:
            ProtocolError: unknown register or value outside :data:`CFR_RANGE`.
        """
        try:
            reg = Cfr(cfr)
        except ValueError:
            raise ProtocolError(f"unknown CFR {cfr!r}") from None
        low, high = CFR_RANGE[reg]
        if not isinstance(value, (int, np.integer)) or not low <= value <= high:
            raise ProtocolError(f"CFR {reg.name} value {value!r} outside [{low}, {high}]")
        targets = range(self.device.channels) if channels is None else list(channels)
        states = [self._channel(c) for c in targets]
        for st in states:
            st.cfr[reg] = int(value)

    def peek(self, channel: int, bank: int, row: int) -> np.ndarray:
        """Return a copy of one bank row, shape ``(columns, lanes)`` (backdoor, no protocol)."""
        st = self._channel(channel)
        self._check_bank(bank)
        self._check_row(row)
        return self._read_block(st, row)[bank].copy()

    def poke(self, channel: int, bank: int, row: int, words: np.ndarray, col: int = 0) -> None:
        """Store ``words`` (shape ``(n, lanes)``) at columns ``col .. col + n - 1`` (backdoor).

        Raises:
            ProtocolError: address out of range or wrong shape; nothing is written.
        """
        st = self._channel(channel)
        self._check_bank(bank)
        self._check_row(row)
        w = self._array(words)
        if w.ndim != 2 or w.shape[1] != self.device.lanes:
            raise ProtocolError(f"poke needs words of shape (n, {self.device.lanes}), "
                                f"got {w.shape}")
        if col < 0 or col + w.shape[0] > self.device.columns:
            raise ProtocolError(f"poke columns {col}..{col + w.shape[0] - 1} outside "
                                f"0..{self.device.columns - 1}")
        self._store(st, row, (bank, slice(col, col + w.shape[0])), w)

    def footprint(self) -> int:
        """Return the bytes held by allocated DRAM rows (all channels)."""
        return sum(block.nbytes for st in self.channels for block in st.mats.values())

    # ----------------------------------------------------------------------- validation

    def _channel(self, channel: int) -> ChannelState:
        if not isinstance(channel, (int, np.integer)) or not 0 <= channel < self.device.channels:
            raise ProtocolError(f"channel {channel!r} outside 0..{self.device.channels - 1}")
        return self.channels[channel]

    def _check_bank(self, bank: int | None) -> int:
        if not isinstance(bank, (int, np.integer)) or not 0 <= bank < self.device.banks:
            raise ProtocolError(f"bank {bank!r} outside 0..{self.device.banks - 1}")
        return int(bank)

    def _check_row(self, row: int | None) -> int:
        if protocol.legal_row(self.device, row):
            return int(row)  # type: ignore[arg-type]
        raise ProtocolError(f"row {row!r} outside 0..{self.device.rows - 1} and the LUT "
                            f"rows {AF_ROW_BASE}..{AF_ROW_BASE + LUT_ROWS - 1}")

    @staticmethod
    def _array(data: np.ndarray) -> np.ndarray:
        """Return ``data`` as ``uint16`` bit patterns; raise on non-integers or wide values."""
        arr = np.asarray(data)
        if dp.is_bf16(arr.dtype):
            return arr.view(np.uint16)
        if arr.dtype.kind not in "ui":
            raise ProtocolError(f"payload must be bfloat16 bit patterns, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > 0xFFFF):
            raise ProtocolError("payload words must fit in 16 bits")
        return arr.astype(np.uint16)

    def _words(self, command: Command, data: np.ndarray | None) -> np.ndarray:
        if data is None:
            raise ProtocolError(f"{command.name} needs a data payload")
        words = self._array(data)
        if words.shape != (self.device.lanes,):
            raise ProtocolError(f"{command.name} payload must have shape "
                                f"({self.device.lanes},), got {words.shape}")
        return words

    def _mask(self, command: Command, mask: int | None) -> np.ndarray:
        lanes = self.device.lanes
        if mask is None:
            return self._all_lanes
        if not isinstance(mask, (int, np.integer)) or not 0 <= mask < 1 << lanes:
            raise ProtocolError(f"{command.name} mask {mask!r} is not a {lanes}-bit mask")
        return (int(mask) >> np.arange(lanes)) & 1 == 1

    # ----------------------------------------------------------------------- memory

    def _default(self, row: int) -> np.ndarray:
        """Return the content of a never-written row (zeros, or the built-in LUT)."""
        if row < AF_ROW_BASE:
            return self._zeros
        afm = row - AF_ROW_BASE
        lut = self._luts.get(afm)
        if lut is None:
            d = self.device
            if d.columns * d.lanes != dp.AF_WORDS:
                raise ProtocolError(f"LUT rows need {dp.AF_WORDS} words per row; this device "
                                    f"has {d.columns * d.lanes}")
            lut = np.broadcast_to(dp.af_lut(afm).reshape(d.columns, d.lanes),
                                  (d.banks, d.columns, d.lanes))
            self._luts[afm] = lut
        return lut

    def _read_block(self, st: ChannelState, row: int) -> np.ndarray:
        """Return all banks of ``row`` (read-only when never written)."""
        block = st.mats.get(row)
        return self._default(row) if block is None else block

    def _store(self, st: ChannelState, row: int, index: tuple, values: np.ndarray) -> None:
        """Write ``values`` to ``block[index]`` of ``row``, allocating the row on first write.

        A write that leaves a never-written row as it was (e.g. zeros) allocates nothing.
        """
        block = st.mats.get(row)
        if block is None:
            default = self._default(row)
            if (default[index] == values).all():
                return
            block = default.copy()
            st.mats[row] = block
        block[index] = values

    # ----------------------------------------------------------------------- command handlers
    # The protocol has accepted the command; each handler computes its values and raises only
    # for what the device cannot hold, before its first mutation. Row and mode changes follow
    # in :meth:`execute` (``protocol.State.apply``).

    def _nop(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        return None

    def _rd(self, st: ChannelState, cmd: Command, a: _Args) -> np.ndarray:
        return self._read_block(st, a.row)[a.bank, a.col].copy()

    def _wr(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        self._store(st, a.row, (a.bank, a.col, a.lanes), a.words[a.lanes])

    def _mac(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        block = self._read_block(st, a.row)
        if st.cfr[Cfr.BROADCAST]:  # the protocol has checked the partner's open row
            vector = block[a.bank ^ 1, a.col]
        else:
            vector = st.gb[a.col]
        st.acc[a.bank] = dp.mac(st.acc[a.bank], block[a.bank, a.col], vector)

    def _mac16(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        self._mac_columns([st], a.row, slice(a.col, a.col + 1))

    def _mac_columns(self, states: list[ChannelState], row: int,
                     cols: slice | np.ndarray) -> None:
        """Apply MAC16 for each column of ``cols`` in turn, in every channel of ``states``.

        The caller has checked that ``row`` is open in all banks of these channels. Channels
        are independent, so one vectorised MAC per column serves all of them.
        """
        for neighbour in (False, True):
            group = [st for st in states if bool(st.cfr[Cfr.BROADCAST]) is neighbour]
            if not group:
                continue
            blocks = np.stack([self._read_block(st, row)[:, cols] for st in group])
            if neighbour:  # even banks take the vector from their odd partner
                acc = np.stack([st.acc[0::2] for st in group])
                new = dp.accumulate(acc, blocks[:, 0::2], blocks[:, 1::2])
                for st, value in zip(group, new):
                    st.acc[0::2] = value
            else:
                vectors = np.stack([st.gb[cols] for st in group])[:, None]
                acc = np.stack([st.acc for st in group])
                new = dp.accumulate(acc, blocks, np.broadcast_to(vectors, blocks.shape))
                for st, value in zip(group, new):
                    st.acc[:] = value

    def _ewmul16(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        self._ewmul_columns(st, a.row, slice(a.col, a.col + 1))

    def _ewmul_columns(self, st: ChannelState, row: int, cols: slice | np.ndarray) -> None:
        """Apply EWMUL16 to every column of ``cols`` (columns are independent).

        The caller has checked that ``row`` is open in all banks.
        """
        per = self.device.banks_per_group
        if per < 3:
            raise ProtocolError("EWMUL16 needs at least 3 banks per bank group")
        stop = (self.device.bankgroups if st.cfr[Cfr.EWMUL_BG] else 1) * per
        block = self._read_block(st, row)
        product = dp.mul(block[0:stop:per, cols], block[1:stop:per, cols])
        self._store(st, row, (slice(2, stop, per), cols), product)

    def _af16(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        block = self._read_block(st, a.row)  # raises if a row cannot hold a LUT
        st.af[:] = dp.af(st.acc, block.reshape(self.device.banks, -1))

    def _rdcp(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        st.gb[a.col] = self._read_block(st, a.row)[a.bank, a.col]

    def _wrcp(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        self._store(st, a.row, (a.bank, a.col), st.gb[a.col].copy())

    def _wrgb(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        st.gb[a.col, a.lanes] = a.words[a.lanes]

    def _wrmac16(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        self._per_bank(cmd)
        st.acc[a.lanes] = dp.bias(a.words[a.lanes])

    def _rdmac16(self, st: ChannelState, cmd: Command, a: _Args) -> np.ndarray:
        return dp.readout(st.acc)

    def _rdaf16(self, st: ChannelState, cmd: Command, a: _Args) -> np.ndarray:
        return st.af.copy()

    def _scatter16(self, st: ChannelState, cmd: Command, a: _Args) -> None:
        self._per_bank(cmd)
        self._store(st, a.row, (slice(None), a.col, a.lanes), a.words[:, None])

    def _per_bank(self, cmd: Command) -> None:
        """Raise unless a 16-word payload can carry one word per bank."""
        if self.device.banks != self.device.lanes:
            raise ProtocolError(f"{cmd.name} needs one payload word per bank")

    # ----------------------------------------------------------------------- instructions

    def _gpr(self, gpr: int) -> np.ndarray:
        return self.gprs.get(gpr, np.zeros(self.device.lanes, dtype=np.uint16))

    def _payload(self, inst: Instruction, columns: int) -> np.ndarray:
        """Return the write payload of ``inst``, shape ``(columns, lanes)``."""
        lanes = self.device.lanes
        if inst.data is not None:
            words = self._array(inst.data)
            if words.size != columns * lanes:
                raise ProtocolError(f"{inst.opcode.value}: payload has {words.size} words, "
                                    f"{columns} columns need {columns * lanes}")
            return words.reshape(columns, lanes)
        if inst.opcode is Opcode.WR_MEM or inst.gpr0 is None:
            return np.zeros((columns, lanes), dtype=np.uint16)
        return np.stack([self._gpr(inst.gpr0 + i) for i in range(columns)])

    def _run(self, inst: Instruction, out: list[Readout]) -> None:
        op = inst.opcode
        if op is Opcode.WR_CFR:
            if inst.cfr is None or inst.value is None:
                raise ProtocolError("W CFR needs a register and a value")
            self.set_cfr(inst.cfr, inst.value)
        elif op is Opcode.WR_GPR:
            self.gprs[self._gpr_id(inst.gpr)] = self._payload_gpr(inst)
        elif op is Opcode.RD_GPR:
            out.append(Readout(None, op, self._gpr(self._gpr_id(inst.gpr)).copy(), self._index))
        elif op is Opcode.EWADD:
            count = 1 if inst.opsize is None else inst.opsize
            g0, g1 = self._gpr_id(inst.gpr0), self._gpr_id(inst.gpr1)
            sums = [dp.add(self._gpr(g0 + i), self._gpr(g1 + i)) for i in range(count)]
            for i, value in enumerate(sums):
                self.gprs[g0 + i] = value
        elif op is Opcode.WR_AFLUT:
            raise ProtocolError("WR_AFLUT is not supported (as in the public simulator); "
                                "write the LUT row with ordinary writes")
        elif op.info.final in (None, Command.SYNC, Command.EOC):
            return
        else:
            self._run_commands(inst, out)

    @staticmethod
    def _gpr_id(gpr: int | None) -> int:
        if not isinstance(gpr, (int, np.integer)) or gpr < 0:
            raise ProtocolError(f"GPR id {gpr!r} is not a non-negative integer")
        return int(gpr)

    def _payload_gpr(self, inst: Instruction) -> np.ndarray:
        if inst.data is None:
            return np.zeros(self.device.lanes, dtype=np.uint16)
        return self._payload(inst, 1)[0]

    def _run_commands(self, inst: Instruction, out: list[Readout]) -> None:
        """Unroll one AiM or ``R/W MEM`` instruction into DRAM commands and execute them."""
        op = inst.opcode
        final = op.info.final
        assert final is not None
        if op in (Opcode.RD_MEM, Opcode.WR_MEM) and inst.channel is None:
            raise ProtocolError(f"{op.value} needs a channel index")
        channels = inst.channels()
        if not channels:
            raise ProtocolError(f"{op.value} names no channel")
        if op.info.one_channel and len(channels) != 1:
            raise ProtocolError(f"{op.value} must name exactly one channel, got {channels}")
        states = {c: self._channel(c) for c in channels}
        first, count = inst.start_col, inst.columns
        needs_col = final in COLUMN
        columns: slice | np.ndarray = slice(first, first + count)
        if needs_col:
            limit = protocol.column_limit(self.device, final)
            if count < 1 or not 0 <= first < limit:
                raise ProtocolError(f"{op.value}: columns {first}..{first + count - 1} "
                                    f"start outside 0..{limit - 1}")
            if first + count > limit:  # past the row: the bus column wraps (bus_column)
                columns = (first + np.arange(count)) % limit
        if final in BANK_ROW_COMMANDS:
            self._check_bank(inst.bank)
        if final in BANK_ROW_COMMANDS or final in ALL_ROWS_COMMANDS - {Command.AF16}:
            self._check_row(inst.row)
        if final in (Command.WRA16, Command.WR16, Command.WRMAC16):
            self._per_bank(final)
        payload = None
        if final in PAYLOAD:
            payload = self._payload(inst, count)
            self._mask(final, inst.mask)
        if final is Command.AF16:  # resolve the LUT row before anything happens
            for st in states.values():
                self._default(AF_ROW_BASE + st.cfr[Cfr.AFM])
        if final is Command.MAC16:  # all channels and columns in one vectorised pass
            for c in channels:
                self._prepare(c, states[c], final, None, inst.row)
            self._mac_columns(list(states.values()), inst.row, columns)
            return
        if final is Command.EWMUL16:  # columns are independent: one pass per channel
            for c in channels:
                self._prepare(c, states[c], final, None, inst.row)
                self._ewmul_columns(states[c], inst.row, columns)
            return
        ranks = {c: k for k, c in enumerate(sorted(channels))}
        for i in range(count):
            col = protocol.bus_column(self.device, final, first + i)
            for c in channels:
                st = states[c]
                row = AF_ROW_BASE + st.cfr[Cfr.AFM] if final is Command.AF16 else inst.row
                self._prepare(c, st, final, inst.bank, row)
                data = None if payload is None else payload[i]
                result = self.execute(c, final, inst.bank, row, col if needs_col else None,
                                      data, inst.mask if final in PAYLOAD else None)
                if result is not None:
                    out.append(Readout(c, op, result, self._index))
                    if inst.gpr0 is not None:
                        self.gprs[inst.gpr0 + ranks[c]] = result

    def _prepare(self, channel: int, st: ChannelState, final: Command, bank: int | None,
                 row: int | None) -> None:
        """Issue the TMOD, precharges and activations ``final`` needs (the controller's prereqs).

        TMOD only when the model enforces the register mode (``modes``).
        """
        state = st.protocol
        if self.modes and (final in REG_MODE_COMMANDS) != state.reg_mode:
            self.execute(channel, Command.TMOD)
        rows = state.open_rows
        if final in ALL_ROWS_COMMANDS:  # the public simulator's RequireAllRowsOpen
            if ((rows != CLOSED) & (rows != row)).any():
                self.execute(channel, Command.PREA)
            if (rows == CLOSED).any():
                self.execute(channel, Command.ACT16, row=row)
        elif final in BANK_ROW_COMMANDS:
            assert bank is not None
            banks = [bank]
            if final is Command.MAC and st.cfr[Cfr.BROADCAST]:
                banks.append(bank ^ 1)
            for b in banks:
                current = int(rows[b])
                if current == row:
                    continue
                if current != CLOSED:
                    self.execute(channel, Command.PRE, bank=b)
                self.execute(channel, Command.ACT, bank=b, row=row)

