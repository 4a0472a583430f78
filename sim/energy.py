"""AiM energy from command counts and bank-state time (the CENT/AiM power script's model).

Energy is computed after a cycle-model run from each channel's command counts and its active
(some bank open) and precharged (all banks closed) cycles. The constants are the public power
script's (per channel: per-chip values divided by two); see ``docs/energy.md`` for the formulas
and for the one place where we deliberately differ: standby energy.

The public script divides the summed per-channel active/precharged time by the channel count
twice and multiplies by it once, so its standby term is one channel's standby power times the
*mean* channel time (``standby="cent"`` reproduces that). By default we charge every channel its
own standby power for its own time (``standby="per_channel"``), which is what a 32-channel
device dissipates; the default is 32x the script's figure for a fully busy device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from patton.sim.device import params
from patton.sim.isa import ACTIVATED_BANKS, Command

__all__ = ["COMPONENTS", "EnergyConstants", "CONSTANTS", "Energy", "energy", "energy_arrays",
           "activations", "STANDBY", "standby_scale"]

C = Command


@dataclass(frozen=True, slots=True)
class EnergyConstants:
    """Power and energy constants (mW, ns, pJ), per channel."""

    p_act: float = 132.6 / 2  # mW while a bank activation lasts (tRC)
    p_rd: float = 876.3 / 2  # mW during a read burst (tBL)
    p_wr: float = 1106.3 / 2  # mW during a write burst (tBL)
    p_act_stby: float = 527.5 / 2  # mW standby with some bank open
    p_pre_stby: float = 366.3 / 2  # mW standby with all banks closed
    t_rc: float = 44.5  # ns an activation is charged for
    t_bl: float = 1.25  # ns a burst is charged for
    t_ccdl: float = 1.0  # ns a MAC16 is charged for (3 x read power)
    pim_factor: float = 3.0  # MAC16 power in units of read power
    dq_pj_per_bit: float = 5.5  # external I/O
    burst_bits: int = 256  # bits per external transfer
    ctrl_trx_mw: float = 267.7082056  # controller transaction engine, per column command
    ctrl_phy_mw: float = 381.0445262  # controller PHY, per command
    channels_per_ctrl: float = 2.0  # channels sharing one controller
    gb_static_mw: float = 0.06702101898  # global buffer leakage
    gb_read_mw: float = 0.2785010052  # global buffer read (WRCP)
    gb_write_mw: float = 0.3254884575  # global buffer write (WRGB, RDCP)
    freq_ghz: float = 2.0  # command clock


CONSTANTS = EnergyConstants()

#: Column commands the controller's transaction engine handles (the script's ``ISR_COUNT``).
_COLUMN = (C.RD, C.WR, C.RDA, C.WRA, C.MAC, C.MAC16, C.AF16, C.EWMUL16, C.RDCP, C.WRCP,
           C.WRGB, C.RDMAC16, C.RDAF16, C.WRMAC16, C.WRA16, C.WR16)
_EXTERNAL = (C.RD, C.WR, C.RDA, C.WRA, C.WRGB, C.RDMAC16, C.RDAF16, C.WRMAC16, C.WRA16,
             C.WR16)
#: The components of :class:`Energy`, in the order they are summed (``docs/energy.md``).
COMPONENTS = ("act", "read", "write", "pim", "dq", "controller", "global_buffer", "standby")
#: The id of every command by name, the keys of a run's per-channel counts.
_INDEX = {c.name: int(c) for c in Command}


@dataclass(slots=True)
class Energy:
    """Energy of a run in nJ, by component; ``total`` is their sum."""

    components: dict[str, float] = field(default_factory=dict)  # COMPONENTS -> nJ

    @property
    def total(self) -> float:
        """Total energy in nJ."""
        return sum(self.components.values())


def energy(command_counts: dict[int, dict[str, int]],
           bank_state_cycles: dict[int, dict[str, int]], cycles: int,
           constants: EnergyConstants = CONSTANTS,
           standby: Literal["per_channel", "cent"] = "per_channel") -> Energy:
    """Return the energy of a run from its per-channel counts and bank-state cycles."""
    n = np.zeros((len(Command), len(command_counts)), dtype=np.int64)
    where = [(i, _INDEX[name], count) for i, counts in enumerate(command_counts.values())
             for name, count in counts.items() if name in _INDEX]
    if where:
        channel, command, count = zip(*where)
        n[list(command), list(channel)] = count
    active = sum(s["active"] for s in bank_state_cycles.values())
    precharged = sum(s["precharged"] for s in bank_state_cycles.values())
    return _energy(n, active, precharged, len(bank_state_cycles), cycles, constants, standby)


def energy_arrays(counts: np.ndarray, stats: np.ndarray, cycles: int,
                  constants: EnergyConstants = CONSTANTS,
                  standby: Literal["per_channel", "cent"] = "per_channel") -> Energy:
    """:func:`energy` of per-channel arrays: ``counts`` ``(channels, commands)`` in command id
    order, ``stats`` ``(channels, 3)`` active, precharged and idle cycles. Bit for bit the
    same (a channel that issued nothing adds zeros to every sum)."""
    return _energy(np.ascontiguousarray(counts.T), int(stats[:, 0].sum()),
                   int(stats[:, 1].sum()), len(stats), cycles, constants, standby)


#: The standby accountings: ``per_channel`` (ours) and ``cent`` (CENT's power script).
STANDBY = ("per_channel", "cent")


def standby_scale(standby: str, channels: int) -> float:
    """The factor on the channels' summed standby time that ``standby`` accounting charges:
    1 for ``per_channel``, ``1 / channels`` for ``cent`` (one channel's standby power for the
    mean channel time). Standby energy is linear in it, so a ``per_channel`` figure converts
    to ``cent`` exactly by this factor.

    Raises:
        ValueError: an unknown accounting.
    """
    if standby == "per_channel":
        return 1.0
    if standby == "cent":
        return 1.0 / max(channels, 1)
    raise ValueError(f"standby must be 'per_channel' or 'cent', not {standby!r}")


def _energy(n: np.ndarray, active: int, precharged: int, channels: int, cycles: int,
            k: EnergyConstants, standby: str) -> Energy:
    """The energy of ``n`` (one row per command, one column per channel) and the channels'
    summed active and precharged cycles."""
    ns_per_cycle = float(params()["cycle_ns"])
    total = dict.fromkeys(COMPONENTS, 0.0)
    if n.shape[1]:
        # every term is computed per channel as the formulas in docs/energy.md write it, and
        # the channels are summed in order (a left fold, as a loop over the channels would)
        per = {
            "act": k.p_act * k.t_rc * (n[C.ACT] + 4 * n[C.ACT4] + 16 * n[C.ACT16]),
            "read": k.p_rd * k.t_bl * (n[C.RDCP] + n[C.RD] + n[C.RDA] + 16 * n[C.AF16]
                                       + n[C.RDMAC16] + n[C.RDAF16]),
            "write": k.p_wr * k.t_bl * (n[C.WRCP] + n[C.WR] + n[C.WRA] + n[C.WRMAC16]
                                        + 16 * n[C.WRA16] + 16 * n[C.WR16]),
            "pim": k.pim_factor * k.p_rd * k.t_ccdl * (n[C.MAC] / 16 + n[C.MAC16]
                                                       + n[C.EWMUL16] / 4),
            "dq": k.dq_pj_per_bit * k.burst_bits * n[list(_EXTERNAL)].sum(axis=0),
            "controller": (k.ctrl_trx_mw * n[list(_COLUMN)].sum(axis=0)
                           + k.ctrl_phy_mw * n.sum(axis=0)) / k.channels_per_ctrl
            / k.freq_ghz,
            "global_buffer": (k.gb_read_mw * n[C.WRCP] + k.gb_write_mw * (n[C.WRGB] + n[C.RDCP]))
            / k.freq_ghz,
        }
        for name, values in per.items():
            total[name] = float(np.add.accumulate(values.astype(np.float64))[-1])
    scale = standby_scale(standby, channels)
    active_ns = active * ns_per_cycle * scale
    precharged_ns = precharged * ns_per_cycle * scale
    total["standby"] = k.p_act_stby * active_ns + k.p_pre_stby * precharged_ns
    total["global_buffer"] += k.gb_static_mw * cycles * ns_per_cycle * channels
    # mW x ns = pJ; report nJ.
    return Energy({name: pj / 1000.0 for name, pj in total.items()})


def activations(command_counts: dict[int, dict[str, int]]) -> int:
    """Row activations of a run: every bank an ``ACT``, ``ACT4`` or ``ACT16`` opened, summed
    over the channels (``command_counts[channel][command name]``)."""
    return sum(n * counts.get(command.name, 0) for counts in command_counts.values()
               for command, n in ACTIVATED_BANKS.items())
