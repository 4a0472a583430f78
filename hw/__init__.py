"""One AiM channel in Amaranth (``docs/hw.md``, ``docs/hw-mac.md``).

Public API (``from patton.hw import ...``; imported on first use, so ``import patton.hw`` does
not load Amaranth): :class:`Channel` and its parameters (:class:`ChannelParams`), its parts
(:class:`Decoder`, :class:`Bank`, :class:`MacUnit`, :class:`GlobalBuffer`,
:class:`TimingChecker`, :class:`Mat`, the AF16 unit's :class:`AfSegment` and
:class:`AfOperands`, :class:`EwmulUnit`) and :func:`emit_verilog` (the channel's Verilog and
the DRAM mat macro).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patton.sim._exports import lazy

#: Each public name by the submodule that defines it.
_EXPORTS = {
    "channel": ("Channel",),
    "params": ("ChannelParams",),
    "decoder": ("Decoder",),
    "bank": ("Bank",),
    "mac": ("MacUnit",),
    "global_buffer": ("GlobalBuffer",),
    "timing_checker": ("TimingChecker",),
    "mat": ("Mat",),
    "af": ("AfSegment", "AfOperands"),
    "ewmul": ("EwmulUnit",),
    "generate": ("emit_verilog",),
}
__all__ = [
    "Channel", "ChannelParams", "Decoder", "Bank", "MacUnit", "GlobalBuffer", "TimingChecker",
    "Mat", "AfSegment", "AfOperands", "EwmulUnit", "emit_verilog",
]
__getattr__, __dir__ = lazy(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:
    from patton.hw.af import AfOperands, AfSegment
    from patton.hw.bank import Bank
    from patton.hw.channel import Channel
    from patton.hw.decoder import Decoder
    from patton.hw.ewmul import EwmulUnit
    from patton.hw.generate import emit_verilog
    from patton.hw.global_buffer import GlobalBuffer
    from patton.hw.mac import MacUnit
    from patton.hw.mat import Mat
    from patton.hw.params import ChannelParams
    from patton.hw.timing_checker import TimingChecker
