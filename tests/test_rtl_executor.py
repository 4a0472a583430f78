"""The RTL executor: programs on live RTL channels that keep their state across calls.

One Verilator simulation per bundled channel stays alive for the executor's life (a named pipe
feeds it schedule segments, ``tb/session.py``): what one program writes (mats, global buffer,
accumulators, open rows, register mode), the next one reads. Read-outs must equal the
functional and cycle executors' bit for bit, ``Result.cycles`` the cycle executor's, with no
violation; a PATTON runtime QK^T, host softmax and SV run on one live ChPerHead group; a
corrupted expectation, an unreplayable program and a dead simulator are reported clearly.
"""

from __future__ import annotations

import numpy as np
import pytest
from patton.sim.device import DEVICE
from patton.sim.executor import CycleExecutor, FunctionalExecutor
from patton.sim.isa import Instruction, Opcode, channel_bit

pytestmark = pytest.mark.verilator

MASK = channel_bit(0) | channel_bit(1)


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _programs(seed: int = 3) -> tuple[list[Instruction], list[Instruction]]:
    """A program that writes (GB, mats by WR_SBK and W MEM, a MAC into the accumulators), and
    one that reads what it left (RD_SBK, R MEM, RD_MAC) and accumulates once more."""
    rng = np.random.default_rng(seed)
    first = [Instruction(Opcode.WR_GB, opsize=4, gpr0=0, channel_mask=MASK, data=_words(rng, 64)),
             Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=MASK, bank=2, row=5, col=3,
                         data=_words(rng, 16)),
             Instruction(Opcode.WR_MEM, channel=1, bank=7, row=9, col=10, data=_words(rng, 16))]
    first += [Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=MASK, bank=b, row=3, col=c,
                          data=_words(rng, 16)) for b in (0, 5) for c in range(4)]
    first.append(Instruction(Opcode.MAC_ABK, opsize=4, channel_mask=MASK, row=3))
    second = [Instruction(Opcode.RD_SBK, gpr0=0, channel_mask=MASK, bank=2, row=5, col=3),
              Instruction(Opcode.RD_MEM, channel=1, bank=7, row=9, col=10),
              Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=MASK),
              Instruction(Opcode.MAC_ABK, opsize=4, channel_mask=MASK, row=3),
              Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=MASK)]
    return first, second


def _same(a, b) -> bool:
    return len(a) == len(b) and all(x == y and x.index == y.index
                                    and np.array_equal(x.data, y.data) for x, y in zip(a, b))


def test_state_persists_across_programs():
    from patton.tb.executor import RtlExecutor

    first, second = _programs()
    functional, timed = FunctionalExecutor(), CycleExecutor()
    cycles = []
    with RtlExecutor(DEVICE, channels=[0, 1]) as rtl:
        for program in (first, second):
            got, want, ref = rtl.run(program), functional.run(program), timed.run(program)
            cycles.append(ref.cycles)
            assert _same(got.readouts, want.readouts) and _same(got.readouts, ref.readouts)
            assert got.cycles == ref.cycles and got.schedule == ref.schedule
            assert set(got.rtl_cycles) == {0, 1}
            assert all(c > got.cycles for c in got.rtl_cycles.values())  # plus the drain
            assert got.discrepancies == []
        # The second program's reads are what the first wrote and accumulated.
        assert [(r.channel, r.opcode, r.index) for r in got.readouts] == [
            (1, Opcode.RD_SBK, 0), (0, Opcode.RD_SBK, 0), (1, Opcode.RD_MEM, 1),
            (1, Opcode.RD_MAC, 2), (0, Opcode.RD_MAC, 2), (1, Opcode.RD_MAC, 4),
            (0, Opcode.RD_MAC, 4)]
        assert all(r.data.any() for r in got.readouts)
        first_mac, second_mac = got.readouts[3].data, got.readouts[5].data
        assert not np.array_equal(first_mac, second_mac)  # the accumulators kept adding
        board = rtl.scoreboard
        assert board.reads == 7 and board.mismatches == 0
        assert board.violations == board.model_violations == board.disagreements == 0
        # Mats read back from the live RTL, now: the words the runtime model says are there.
        assert rtl.check_mats() == 2 * 9 + 1 and board.mat_mismatches == 0
        assert rtl.mats(1)[2, 5, 3].tolist() == first[1].data.tolist()
        assert rtl.stats.programs == 2 and rtl.stats.model_cycles == sum(cycles)


def test_runtime_attention_on_one_live_group():
    from patton.runtime.models import ModelSpec
    from patton.runtime.patton.config import Config
    from patton.runtime.patton.lifecycle import Runtime
    from patton.tb.executor import RtlExecutor, head_channels

    config = Config(ModelSpec("one-group", layers=1, kv_heads=1, q_heads=2, d_head=64),
                    DEVICE.with_(channels=4), layer_rows=6)
    rng = np.random.default_rng(9)

    def kv(n: int) -> tuple[np.ndarray, np.ndarray]:
        shape = (config.n_layers, n, config.heads, config.d_head)
        return (rng.integers(0x3000, 0x4000, shape).astype(np.uint16),
                rng.integers(0x3000, 0x4000, shape).astype(np.uint16))

    rt = Runtime(config)
    rt.allocate(0, 0)
    rt.allocate(0, 1)
    writes = [rt.write(0, 0, *kv(16)).all, rt.write(1, 0, *kv(5)).all]  # full + Commit Zone
    group = head_channels(config, 0)
    assert group == [0, 1, 2, 3]
    functional = FunctionalExecutor(config.device)
    with RtlExecutor(config.device, channels=group) as rtl:
        for program in writes:
            assert _same(rtl.run(program).readouts, functional.run(program).readouts)
        for step in range(2):
            query = (rng.standard_normal((config.heads, config.d_head)).astype(np.float32)
                     .view(np.uint32) >> 16).astype(np.uint16)
            token = rt.write(1, 4 + step, *kv(1)).all if step else []  # a decode step's token
            qk, qplan = rt.qk(0, 0, query)
            qk = token + qk  # (its own program could end before its writes issue)
            got, want = rtl.run(qk), functional.run(qk)
            assert got.readouts and _same(got.readouts, want.readouts)
            scores = qplan.decode(got.readouts, config)[:, rt.token_index(0)]
            assert np.array_equal(scores, qplan.decode(want.readouts, config)[:, rt.token_index(0)])
            # softmax on the host, in float32, back to bf16
            x = (scores.astype(np.uint32) << 16).view(np.float32)
            p = np.exp(x - x.max(axis=1, keepdims=True))
            probs = ((p / p.sum(axis=1, keepdims=True)).astype(np.float32).view(np.uint32)
                     >> 16).astype(np.uint16)
            sv, splan = rt.sv(0, 0, probs)
            got, want = rtl.run(sv), functional.run(sv)
            assert got.readouts and _same(got.readouts, want.readouts)
            out = splan.decode(got.readouts, config)
            assert np.array_equal(out, splan.decode(want.readouts, config)) and out.any()
        assert rtl.check_mats() > 0  # every Key and Value word where the runtime put it
        assert rtl.scoreboard.ok and rtl.scoreboard.reads > 0


def test_failures_are_reported_clearly():
    from patton.tb.executor import RtlExecutor
    from patton.tb.scoreboard import ScoreboardError
    from patton.tb.session import SimulatorError

    first, second = _programs(5)
    with RtlExecutor(DEVICE, channels=[0, 1]) as rtl:
        with pytest.raises(ValueError, match=r"instruction 0: W MEM has no data= payload"):
            rtl.run([Instruction(Opcode.WR_MEM, channel=0, bank=0, row=1, col=0)])
        with pytest.raises(ValueError, match=r"channel\(s\) \[2\].*bundles \[0, 1\]"):
            rtl.run([Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=channel_bit(2))])
        with pytest.raises(ValueError, match="row 64, but the RTL channel is built with rows=64"):
            rtl.run([Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=MASK, row=64)])
        assert rtl.stats.programs == 0  # refused before anything ran
        rtl.run(first)
        # Corrupt the expectation: the model's copy of the word RD_SBK reads on channel 0.
        words = rtl.model.peek(0, 2, 5)
        words[3, 7] ^= 0x0040
        rtl.model.poke(0, 2, 5, words)
        with pytest.raises(ScoreboardError) as caught:
            rtl.run(second)
        text = str(caught.value)
        assert "program 2 ch 0 cycle" in text and "RD bank 2 row 5 col 3" in text
        assert "(instruction 0 RD_SBK): value: expected" in text and ", RTL " in text
        assert rtl.scoreboard.mismatches == 1 and rtl.scoreboard.found[0].kind == "value"
        # A lone write (which the public simulator would leave buffered at EOC) is drained
        # into the schedule, lands in the RTL and reads back in the next program.
        words = _words(np.random.default_rng(1), 16)
        wrote = rtl.run([Instruction(Opcode.WR_MEM, channel=1, bank=7, row=20, col=0,
                                     data=words)])
        assert [c.command.name for c in wrote.schedule][-2:] == ["ACT", "WR"]
        back = rtl.run([Instruction(Opcode.RD_MEM, channel=1, bank=7, row=20, col=0)])
        assert back.readouts[0].data.tolist() == words.tolist()
        # A simulator that dies: the next run says so instead of waiting.
        rtl.sessions[1]._simulator.process.kill()
        with pytest.raises(SimulatorError, match=r"RTL session .*-ch1.*exited"):
            rtl.run(first)


def test_lenient_scoreboard_counts_instead_of_raising():
    from patton.tb.executor import RtlExecutor

    first, second = _programs(6)
    with RtlExecutor(DEVICE, channels=[0, 1], strict=False) as rtl:
        rtl.run(first)
        rtl.model.poke(1, 7, 9, np.full((1, 16), 0x3F80, np.uint16), col=10)
        result = rtl.run(second)
        assert [d.kind for d in result.discrepancies] == ["value"]
        assert result.discrepancies[0].channel == 1
        # The read-out is the RTL's value (what was written), not the corrupted model's.
        assert result.readouts[2].data.tolist() == first[2].data.tolist()
        assert rtl.scoreboard.mismatches == 1 and not rtl.scoreboard.ok
