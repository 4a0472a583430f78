"""Read returns in the same cycle (amaranth.sim): an RD at ``t`` and an RDMAC16 at ``t + 50``.

The timing table allows the pair, and both return at ``t + 52`` (latencies 52 and 2). The RD
arrives on ``rdata``, the RDMAC16 on ``rdata_mac``; both must equal the functional model's
values bit for bit.
"""

from __future__ import annotations

import numpy as np
from patton.sim.check import verify
from patton.sim.device import DEVICE
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Command
from patton.sim.timing import TIMING
from test_channel import _cmd, assert_same_reads, expected_reads, run_many

_C = Command
#: RD latency minus RDMAC16 latency: the issue distance that makes them return together.
APART = TIMING.latency[_C.RD] - TIMING.latency[_C.RDMAC16]


def collision_schedule() -> list:
    """Return a legal schedule whose RD and RDMAC16 return in the same cycle.

    The cycles are the earliest ``verify`` accepts, except the RDMAC16's, which is placed
    ``APART`` cycles after the RD (later than it needs to be).
    """
    rng = np.random.default_rng(9)
    words = (rng.standard_normal((2, 16)).astype(np.float32).view(np.uint32) >> 16).astype(
        np.uint16)
    return [_cmd(0, _C.ACT, 3, 1), _cmd(28, _C.WR, 3, 1, 2, words=words[0]),
            _cmd(29, _C.TMOD), _cmd(61, _C.WRMAC16, words=words[1]), _cmd(62, _C.TMOD),
            _cmd(94, _C.RD, 3, 1, 2), _cmd(95, _C.TMOD), _cmd(94 + APART, _C.RDMAC16)]


def test_rd_and_rdmac16_returning_together_both_arrive():
    schedule = collision_schedule()
    assert APART == 50 and verify(schedule) == []
    got = run_many([schedule])[0]
    assert got["violations"] == [] and got["count"] == 0
    back = 94 + TIMING.latency[_C.RD]
    assert [(t, c) for t, c, _ in got["reads"]] == [(back, _C.RD), (back, _C.RDMAC16)]
    want = expected_reads(schedule, FunctionalModel(DEVICE))
    assert all(data.any() for *_, data in want)
    assert_same_reads(got["reads"], want)
