"""Instruction programs for tests, demos and benchmarks: random mixes and a GEMV.

Every builder returns a list of :class:`Instruction` that ends with EOC and passes
:func:`patton.sim.trace.validate` for the given device.
"""

from __future__ import annotations

import numpy as np
from patton.sim.device import DEVICE, Device
from patton.sim.isa import Cfr, Instruction, Opcode, channel_bit

__all__ = ["KINDS", "random_program", "gemv_program"]


def _mask(rng: np.random.Generator, channels: list[int]) -> int:
    mask = 0
    for c in channels:
        mask |= channel_bit(c)
    return mask


#: Instruction kinds :func:`random_program` draws from.
KINDS = ("mac_abk", "mac_sbk", "wr_gb", "wr_bias", "rd_mac", "copy_bkgb", "copy_gbbk", "ewmul",
         "wr_abk", "af", "rd_af", "rd_mem", "wr_mem", "wr_sbk", "rd_sbk", "sync", "cfr", "gpr")


def random_program(rng: np.random.Generator, length: int, device: Device = DEVICE,
                   channels: int = 4, rows: int = 4, data: bool = False,
                   kinds: tuple[str, ...] = KINDS, broadcast: bool = True,
                   wide: bool = False) -> list[Instruction]:
    """Return a random mix of every instruction kind on the first ``channels`` channels.

    Rows are drawn from ``rows`` values so that row hits, conflicts and re-activations all
    happen; opsizes go up to a full row so that controller buffers overflow; conventional
    reads and writes are mixed in so that the two request classes contend; CFR writes change
    the AF mode, the EWMUL bank groups and (around single MAC_ABKs only: the controller does not
    open a MAC_SBK's partner bank) the MAC vector source. With ``data``, writes carry random
    bfloat16 payloads. ``kinds`` restricts the mix (names from :data:`KINDS`); ``broadcast``
    allows the partner-bank MAC vector; ``wide`` also draws column instructions that run past
    the row (up to four rows' worth, as CENT's traces have; ``docs/isa.md``).
    """
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"unknown instruction kinds {sorted(unknown)} (known: {KINDS})")
    used = list(range(channels))
    program: list[Instruction] = []

    def some() -> list[int]:
        k = int(rng.integers(1, channels + 1))
        return sorted(rng.choice(used, size=k, replace=False).tolist())

    def payload(columns: int) -> np.ndarray | None:
        if not data:
            return None
        values = rng.standard_normal(columns * device.lanes).astype(np.float32)
        return (values.view(np.uint32) >> 16).astype(np.uint16)

    def cols() -> tuple[int, int | None]:
        sizes = [1, 2, 4, 8, 16, 40, device.columns]
        if wide:
            sizes += [device.columns + 1, 3 * device.columns // 2, 4 * device.columns]
        size = int(rng.choice(sizes))
        start = int(rng.integers(0, max(device.columns - size, 0) + 1))
        return size, (start if start else None)

    for _ in range(length):
        kind = kinds[int(rng.integers(len(kinds)))]
        row = int(rng.integers(rows))
        bank = int(rng.integers(device.banks))
        if kind == "mac_abk":
            size, start = cols()
            ins = Instruction(Opcode.MAC_ABK, opsize=size, channel_mask=_mask(rng, some()),
                              row=row, col=start)
            if broadcast and rng.random() < 0.3:  # vector from the partner bank, not the GB
                program.append(Instruction(Opcode.WR_CFR, cfr=int(Cfr.BROADCAST), value=1))
                program.append(ins)
                ins = Instruction(Opcode.WR_CFR, cfr=int(Cfr.BROADCAST), value=0)
        elif kind == "mac_sbk":
            size, start = cols()
            ins = Instruction(Opcode.MAC_SBK, opsize=size, channel_mask=_mask(rng, some()),
                              bank=bank, row=row, col=start)
        elif kind == "wr_gb":
            size, start = cols()
            ins = Instruction(Opcode.WR_GB, opsize=size, gpr0=0, channel_mask=_mask(rng, some()),
                              col=start, data=payload(size))
        elif kind == "wr_bias":
            ins = Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=_mask(rng, some()),
                              data=payload(1))
        elif kind in ("rd_mac", "rd_af"):
            op = Opcode.RD_MAC if kind == "rd_mac" else Opcode.RD_AF
            ins = Instruction(op, gpr0=0, channel_mask=_mask(rng, some()))
        elif kind in ("copy_bkgb", "copy_gbbk"):
            size, start = cols()
            op = Opcode.COPY_BKGB if kind == "copy_bkgb" else Opcode.COPY_GBBK
            ins = Instruction(op, opsize=size, channel_mask=_mask(rng, some()), bank=bank,
                              row=row, col=start)
        elif kind == "ewmul":
            size, start = cols()
            ins = Instruction(Opcode.EWMUL, opsize=size, channel_mask=_mask(rng, some()),
                              row=row, col=start)
        elif kind == "wr_abk":
            ins = Instruction(Opcode.WR_ABK, gpr0=0,
                              channel_mask=channel_bit(int(rng.choice(used))), row=row,
                              col=int(rng.integers(device.columns)) or None, data=payload(1))
        elif kind == "af":
            ins = Instruction(Opcode.AF, channel_mask=_mask(rng, some()))
        elif kind in ("rd_mem", "wr_mem"):
            op = Opcode.RD_MEM if kind == "rd_mem" else Opcode.WR_MEM
            ins = Instruction(op, channel=int(rng.choice(used)), bank=bank, row=row,
                              col=int(rng.integers(device.columns)),
                              data=payload(1) if op == Opcode.WR_MEM else None)
        elif kind in ("wr_sbk", "rd_sbk"):
            op = Opcode.WR_SBK if kind == "wr_sbk" else Opcode.RD_SBK
            ins = Instruction(op, gpr0=0, channel_mask=_mask(rng, some()), bank=bank, row=row,
                              data=payload(1) if op == Opcode.WR_SBK else None)
        elif kind == "sync":
            ins = Instruction(Opcode.SYNC)
        elif kind == "cfr":
            if rng.random() < 0.5:
                ins = Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=int(rng.integers(8)))
            else:
                ins = Instruction(Opcode.WR_CFR, cfr=int(Cfr.EWMUL_BG),
                                  value=int(rng.integers(2)))
        else:
            ins = Instruction(Opcode.WR_GPR, gpr=int(rng.integers(8)))
        program.append(ins)
    program.append(Instruction(Opcode.EOC))
    return program


def gemv_program(vector: np.ndarray, outputs_per_bank: int, channels: list[int] | None = None,
                 weights: np.ndarray | None = None,
                 device: Device = DEVICE) -> list[Instruction]:
    """Return the AiM program of a GEMV ``y = W x``, laid out as CENT lays it out.

    Output row ``o`` of ``W`` lives in channel ``channels[o // (banks * n)]``, bank
    ``(o // n) % banks``, DRAM row ``o % n`` (``n = outputs_per_bank``), its ``k`` elements in
    columns ``0 .. k/16 - 1``. The program multicasts ``x`` (``k`` bfloat16 bit patterns,
    ``k <= 1024``) into every global buffer, then for each DRAM row ``j``: WR_BIAS (zero),
    MAC_ABK over ``k / 16`` columns, RD_MAC. With ``weights`` (``[outputs, k]`` bit patterns)
    it first writes them with ``W MEM`` lines; without, the caller places them (e.g. with
    :meth:`FunctionalModel.poke`), as a serving system that keeps its weights resident would.
    """
    lanes = device.lanes
    vector = np.asarray(vector, dtype=np.uint16).reshape(-1)
    k = vector.size
    if k == 0 or k % lanes or k > device.gb_columns * lanes:
        raise ValueError(f"vector length {k} must be a multiple of {lanes} up to "
                         f"{device.gb_columns * lanes}")
    channels = [0] if channels is None else channels
    n, columns = outputs_per_bank, k // lanes
    mask = 0
    for c in channels:
        mask |= channel_bit(c)
    program = [Instruction(Opcode.WR_GB, opsize=columns, gpr0=0, channel_mask=mask,
                           data=vector)]
    if weights is not None:
        expected = (len(channels) * device.banks * n, k)
        if weights.shape != expected:
            raise ValueError(f"weights have shape {weights.shape}, expected {expected}")
        for o, row in enumerate(np.asarray(weights, dtype=np.uint16)):
            channel = channels[o // (device.banks * n)]
            bank, j = (o // n) % device.banks, o % n
            for c in range(columns):
                program.append(Instruction(Opcode.WR_MEM, channel=channel, bank=bank, row=j,
                                           col=c, data=row[c * lanes:(c + 1) * lanes]))
    for j in range(n):
        program.append(Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=mask,
                                   data=np.zeros(lanes, dtype=np.uint16)))
        program.append(Instruction(Opcode.MAC_ABK, opsize=columns, channel_mask=mask, row=j))
        program.append(Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask))
    program.append(Instruction(Opcode.EOC))
    return program
