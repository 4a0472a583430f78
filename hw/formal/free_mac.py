"""MAC units whose outputs are free: a stand-in for :mod:`patton.hw.mac` in formal harnesses.

A ``Channel(mac=free_mac)`` gets, for each of ``MacUnit``, ``Bf16Readout`` and ``BiasLoad``, a
component with the real one's signature whose every output is an arbitrary value in every cycle
(``AnySeq``). A property proved on that channel holds whatever the MAC datapath computes; the
datapath itself is checked bit for bit against :mod:`patton.sim.datapath` elsewhere
(``docs/hw-mac.md``). It keeps the sixteen MAC cones, two thirds of the channel, out of the
proofs.
"""

from __future__ import annotations

import inspect

from amaranth.asserts import AnySeq
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import Out
from patton.hw import mac as _mac

__all__ = ["Bf16Readout", "BiasLoad", "MacUnit"]


class _Free(wiring.Component):
    """A component with the signature of ``_real``, every output free in every cycle."""

    _real: type

    def __init__(self) -> None:
        annotations = inspect.get_annotations(self._real, eval_str=True)
        super().__init__({name: member for name, member in annotations.items()
                          if isinstance(member, wiring.Member)})

    def elaborate(self, platform):
        m = Module()
        for name, member in self.signature.members.items():
            if member.flow == Out:
                port = getattr(self, name)
                m.d.comb += port.eq(AnySeq(port.shape()))
        return m


class MacUnit(_Free):
    """``patton.hw.mac.MacUnit``'s ports; ``result`` is free."""

    _real = _mac.MacUnit


class Bf16Readout(_Free):
    """``patton.hw.mac.Bf16Readout``'s ports; ``value`` is free."""

    _real = _mac.Bf16Readout


class BiasLoad(_Free):
    """``patton.hw.mac.BiasLoad``'s ports; ``acc`` is free."""

    _real = _mac.BiasLoad
