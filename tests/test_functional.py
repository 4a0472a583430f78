"""The NumPy functional model: command semantics, protocol errors, and programs run end to end."""

from __future__ import annotations

import copy
import tracemalloc

import numpy as np
import pytest
from patton.sim import datapath as dp
from patton.sim.device import AF_ROW_BASE, DEVICE
from patton.sim.functional import FunctionalModel, ProtocolError
from patton.sim.isa import Cfr, Command, Instruction, Opcode, channel_bit
from patton.sim.program import Readout

BANKS, LANES, COLS = DEVICE.banks, DEVICE.lanes, DEVICE.columns
C = Command


def bf16(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    return dp.to_bf16(rng.standard_normal(shape) * scale)


def chmask(*channels: int) -> int:
    out = 0
    for c in channels:
        out |= channel_bit(c)
    return out


def snapshot(model: FunctionalModel) -> tuple:
    return copy.deepcopy((model.channels, model.gprs))


def assert_unchanged(model: FunctionalModel, snap: tuple) -> None:
    channels, gprs = snap
    assert model.gprs.keys() == gprs.keys()
    for key, value in gprs.items():
        assert np.array_equal(model.gprs[key], value)
    for now, before in zip(model.channels, channels):
        assert np.array_equal(now.open_rows, before.open_rows)
        assert np.array_equal(now.gb, before.gb)
        assert np.array_equal(now.acc, before.acc)
        assert np.array_equal(now.af, before.af)
        assert now.cfr == before.cfr
        assert now.mats.keys() == before.mats.keys()
        for row, block in before.mats.items():
            assert np.array_equal(now.mats[row], block)


@pytest.fixture
def model() -> FunctionalModel:
    return FunctionalModel()


# --------------------------------------------------------------------------- DRAM commands


def test_write_read_with_lane_mask(model: FunctionalModel) -> None:
    model.execute(3, C.ACT, bank=5, row=100)
    assert np.array_equal(model.execute(3, C.RD, bank=5, col=7), np.zeros(LANES, np.uint16))
    words = np.arange(1, LANES + 1, dtype=np.uint16)
    model.execute(3, C.WR, bank=5, row=100, col=7, data=words, mask=0x00FF)
    got = model.execute(3, C.RD, bank=5, col=7)
    assert got.tolist() == list(range(1, 9)) + [0] * 8
    assert np.array_equal(model.peek(3, 4, 100), np.zeros((COLS, LANES), np.uint16))
    assert model.peek(3, 5, 100)[7].tolist() == got.tolist()
    model.execute(3, C.RDA, bank=5, col=7)  # read with auto-precharge closes the bank
    assert model.channels[3].open_rows[5] == -1
    with pytest.raises(ProtocolError, match="no open row"):
        model.execute(3, C.RD, bank=5, col=7)


def test_act_pre_act16_prea_and_bank_groups(model: FunctionalModel) -> None:
    model.execute(0, C.ACT4, bank=6, row=9)  # bank group 1
    assert model.channels[0].open_rows.tolist() == [-1] * 4 + [9] * 4 + [-1] * 8
    model.execute(0, C.PRE4, bank=4)
    model.execute(0, C.ACT, bank=15, row=11)
    model.execute(0, C.ACT16, row=11)  # bank 15 already has row 11 open: allowed
    assert (model.channels[0].open_rows == 11).all()
    model.execute(0, C.PRE, bank=2)
    assert model.channels[0].open_rows[2] == -1
    model.execute(0, C.PREA)
    assert (model.channels[0].open_rows == -1).all()
    model.execute(0, C.REFab)
    for cmd in (C.TMOD, C.SYNC, C.EOC):
        assert model.execute(0, cmd) is None


def test_mac16_global_buffer_bias_and_readout(model: FunctionalModel) -> None:
    rng = np.random.default_rng(1)
    row = rng.integers(0, DEVICE.rows)
    data = bf16(rng, BANKS, COLS, LANES)
    for b in range(BANKS):
        model.poke(2, b, int(row), data[b])
    gb = bf16(rng, COLS, LANES)
    for c in range(COLS):
        model.execute(2, C.WRGB, col=c, data=gb[c])
    biases = bf16(rng, BANKS)
    model.execute(2, C.WRMAC16, data=biases)
    model.execute(2, C.ACT16, row=int(row))
    for c in range(10, 20):
        model.execute(2, C.MAC16, row=int(row), col=c)
    want = dp.accumulate(dp.bias(biases), data[:, 10:20],
                         np.broadcast_to(gb[10:20], (BANKS, 10, LANES)))
    assert np.array_equal(model.channels[2].acc, want)
    out = model.execute(2, C.RDMAC16)
    assert np.array_equal(out, dp.readout(want))
    assert np.array_equal(model.execute(2, C.RDMAC16), out)  # reading does not clear


def test_mac_single_bank_and_neighbour_broadcast(model: FunctionalModel) -> None:
    rng = np.random.default_rng(2)
    data = bf16(rng, BANKS, COLS, LANES)
    for b in range(BANKS):
        model.poke(0, b, 4, data[b])
    gb = bf16(rng, LANES)
    model.execute(0, C.WRGB, col=3, data=gb)
    model.execute(0, C.ACT, bank=5, row=4)
    model.execute(0, C.MAC, bank=5, row=4, col=3)
    acc = model.channels[0].acc
    assert acc[5] == dp.mac(np.uint32(0), data[5, 3], gb)
    assert (np.delete(acc, 5) == 0).all()

    # BROADCAST = 1: the vector comes from the partner bank b ^ 1.
    model.set_cfr(Cfr.BROADCAST, 1)
    with pytest.raises(ProtocolError, match="bank 4 has no open row"):
        model.execute(0, C.MAC, bank=5, row=4, col=3)
    model.execute(0, C.ACT, bank=4, row=4)
    model.execute(0, C.MAC, bank=5, col=0)
    assert acc[5] == dp.mac(dp.mac(np.uint32(0), data[5, 3], gb), data[5, 0], data[4, 0])

    model.execute(0, C.PREA)
    model.execute(0, C.WRMAC16, data=np.zeros(LANES, np.uint16))
    model.execute(0, C.ACT16, row=4)
    model.execute(0, C.MAC16, col=9)
    even = dp.mac(np.zeros(BANKS // 2, np.uint32), data[0::2, 9], data[1::2, 9])
    assert np.array_equal(acc[0::2], even)
    assert (acc[1::2] == 0).all()  # odd banks only lend their data


def test_ewmul16_bank_groups(model: FunctionalModel) -> None:
    rng = np.random.default_rng(3)
    data = bf16(rng, BANKS, COLS, LANES)
    for b in range(BANKS):
        model.poke(1, b, 8, data[b])
    model.execute(1, C.ACT16, row=8)
    assert model.channels[1].cfr[Cfr.EWMUL_BG] == 1  # reset value: all bank groups
    model.execute(1, C.EWMUL16, col=6)
    for g in range(4):
        got = model.peek(1, 4 * g + 2, 8)
        assert np.array_equal(got[6], dp.mul(data[4 * g, 6], data[4 * g + 1, 6]))
        assert np.array_equal(np.delete(got, 6, axis=0), np.delete(data[4 * g + 2], 6, axis=0))
    model.set_cfr(Cfr.EWMUL_BG, 0)  # bank group 0 only
    model.execute(1, C.EWMUL16, col=7)
    assert np.array_equal(model.peek(1, 2, 8)[7], dp.mul(data[0, 7], data[1, 7]))
    for g in (1, 2, 3):
        assert np.array_equal(model.peek(1, 4 * g + 2, 8)[7], data[4 * g + 2, 7])
    for b in (0, 1, 3, 4, 5, 7):
        assert np.array_equal(model.peek(1, b, 8), data[b])


def test_copies_between_bank_and_global_buffer(model: FunctionalModel) -> None:
    rng = np.random.default_rng(4)
    words = bf16(rng, LANES)
    model.execute(5, C.ACT, bank=9, row=3)
    model.execute(5, C.WR, bank=9, col=12, data=words)
    model.execute(5, C.RDCP, bank=9, col=12)
    assert np.array_equal(model.channels[5].gb[12], words)
    model.execute(5, C.ACT, bank=10, row=77)
    model.execute(5, C.WRCP, bank=10, col=12)
    assert np.array_equal(model.peek(5, 10, 77)[12], words)


def test_wra16_scatters_one_word_per_bank_and_closes(model: FunctionalModel) -> None:
    rng = np.random.default_rng(5)
    words = bf16(rng, BANKS)
    model.execute(7, C.ACT16, row=30)
    model.execute(7, C.WRA16, row=30, col=2, data=words, mask=1 << 13)
    assert (model.channels[7].open_rows == -1).all()
    for b in range(BANKS):
        col = model.peek(7, b, 30)[2]
        assert col[13] == words[b] and (np.delete(col, 13) == 0).all()
    model.execute(7, C.ACT16, row=30)
    model.execute(7, C.WRA16, col=5, data=words)  # no mask: every lane
    for b in range(BANKS):
        assert (model.peek(7, b, 30)[5] == words[b]).all()


def test_af16_uses_the_open_lut_row(model: FunctionalModel) -> None:
    rng = np.random.default_rng(6)
    biases = dp.to_bf16(rng.uniform(-6, 6, BANKS))
    model.execute(0, C.WRMAC16, data=biases)
    with pytest.raises(ProtocolError, match="needs one row open"):
        model.execute(0, C.AF16)
    model.execute(0, C.ACT16, row=7)
    with pytest.raises(ProtocolError, match="needs a LUT row"):
        model.execute(0, C.AF16)
    model.execute(0, C.PREA)
    model.execute(0, C.ACT16, row=AF_ROW_BASE)  # sigmoid's row: the open row decides
    model.execute(0, C.AF16)
    assert np.array_equal(model.execute(0, C.RDAF16), dp.af(dp.bias(biases), dp.af_lut(0)))
    model.execute(0, C.PREA)
    model.execute(0, C.ACT16, row=AF_ROW_BASE + 1)  # tanh
    with pytest.raises(ProtocolError, match="row 536870913 is open, not 536870912"):
        model.execute(0, C.AF16, row=AF_ROW_BASE)
    model.execute(0, C.AF16)
    out = model.execute(0, C.RDAF16)
    assert np.array_equal(out, dp.af(dp.bias(biases), dp.af_lut(1)))
    assert np.allclose(dp.from_bf16(out), np.tanh(dp.from_bf16(biases)), atol=2 ** -7)
    # The LUT is an ordinary row: rewriting bank 3's copy changes bank 3 only.
    identity = dp.af_lut(7).reshape(COLS, LANES)
    for c in range(COLS):
        model.execute(0, C.WR, bank=3, col=c, data=identity[c])
    model.execute(0, C.AF16)
    again = model.execute(0, C.RDAF16)
    assert again[3] == biases[3]
    assert np.array_equal(np.delete(again, 3), np.delete(out, 3))


# --------------------------------------------------------------------------- protocol errors

BAD_COMMANDS = [
    ("closed bank", dict(channel=0, command=C.RD, bank=1, col=0), "no open row"),
    ("wrong row", dict(channel=0, command=C.WR, bank=0, row=6, col=0,
                       data=np.ones(LANES, np.uint16)), "row 5 open, not 6"),
    ("act open bank", dict(channel=0, command=C.ACT, bank=0, row=9), "precharge first"),
    ("act16 with open bank", dict(channel=0, command=C.ACT16, row=9), "precharge first"),
    ("act4 with open bank", dict(channel=0, command=C.ACT4, bank=3, row=4), "another row"),
    ("mixed rows", dict(channel=0, command=C.MAC16, col=0), "one row open in all banks"),
    ("ewmul mixed rows", dict(channel=0, command=C.EWMUL16, col=0), "one row open"),
    ("wra16 mixed rows", dict(channel=0, command=C.WRA16, col=0,
                              data=np.ones(LANES, np.uint16)), "one row open"),
    ("bank range", dict(channel=0, command=C.ACT, bank=16, row=1), "bank 16 outside"),
    ("row range", dict(channel=0, command=C.ACT, bank=3, row=DEVICE.rows), "row 16384"),
    ("lut row range", dict(channel=0, command=C.ACT, bank=3, row=AF_ROW_BASE + 8), "row"),
    ("column range", dict(channel=0, command=C.RD, bank=0, col=COLS), "column 64 outside"),
    ("gb column range", dict(channel=0, command=C.WRGB, col=-1,
                             data=np.ones(LANES, np.uint16)), "column -1"),
    ("channel range", dict(channel=32, command=C.PREA), "channel 32 outside"),
    ("no payload", dict(channel=0, command=C.WR, bank=0, col=0), "needs a data payload"),
    ("short payload", dict(channel=0, command=C.WRGB, col=0,
                           data=np.ones(8, np.uint16)), "shape"),
    ("float payload", dict(channel=0, command=C.WRMAC16, data=np.ones(LANES)), "dtype"),
    ("wide payload", dict(channel=0, command=C.WRMAC16,
                          data=np.full(LANES, 70000)), "16 bits"),
    ("wide mask", dict(channel=0, command=C.WR, bank=0, col=0,
                       data=np.ones(LANES, np.uint16), mask=1 << 16), "mask"),
    ("refresh open", dict(channel=0, command=C.REFab), "precharged"),
    ("neighbour closed", dict(channel=0, command=C.MAC, bank=0, col=0), "bank 1 has no open"),
    ("af row closed", dict(channel=0, command=C.AF16), "one row open"),
    ("unknown command", dict(channel=0, command=99), "unknown command"),
]


@pytest.mark.parametrize(("name", "call", "message"), BAD_COMMANDS,
                         ids=[b[0] for b in BAD_COMMANDS])
def test_protocol_errors_leave_the_model_unchanged(name: str, call: dict,
                                                   message: str) -> None:
    model = FunctionalModel()
    rng = np.random.default_rng(7)
    model.execute(0, C.ACT, bank=0, row=5)
    model.execute(0, C.WR, bank=0, col=1, data=bf16(rng, LANES))
    model.execute(0, C.WRGB, col=0, data=bf16(rng, LANES))
    model.execute(0, C.WRMAC16, data=bf16(rng, LANES))
    model.gprs[4] = bf16(rng, LANES)
    if name == "neighbour closed":
        model.set_cfr(Cfr.BROADCAST, 1)
    before = snapshot(model)
    with pytest.raises(ProtocolError, match=message):
        model.execute(**call)
    assert_unchanged(model, before)


def test_malformed_instructions_change_nothing() -> None:
    model = FunctionalModel(DEVICE.with_(channels=1))
    model.run([Instruction(Opcode.WR_GPR, gpr=1, data=np.arange(LANES, dtype=np.uint16))])
    bad = [
        (Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=chmask(0), row=3, col=64),
         "start outside 0..63"),  # a wide opsize wraps (docs/isa.md); a start past the row
        (Instruction(Opcode.MAC_ABK, opsize=8, channel_mask=chmask(0), row=3, col=70),
         "columns 70..77 start outside"),
        (Instruction(Opcode.WR_GB, opsize=2, gpr0=0, channel_mask=chmask(0),
                     data=np.zeros(LANES, np.uint16)), "payload has 16 words"),
        (Instruction(Opcode.COPY_BKGB, opsize=1, channel_mask=chmask(0), bank=16, row=3),
         "bank 16"),
        (Instruction(Opcode.MAC_SBK, opsize=1, channel_mask=chmask(0), bank=1, row=-1),
         "row -1"),
        (Instruction(Opcode.WR_SBK, gpr0=1, channel_mask=chmask(0), bank=0, row=0,
                     mask=0x1_0000), "mask"),
        (Instruction(Opcode.WR_CFR, cfr=Cfr.AFM, value=8), "outside"),
        (Instruction(Opcode.WR_CFR, cfr=9, value=0), "unknown CFR"),
        (Instruction(Opcode.WR_AFLUT, opsize=1), "not supported"),
        (Instruction(Opcode.EWADD, opsize=1, gpr0=-1, gpr1=0), "GPR id -1"),
        (Instruction(Opcode.MAC_ABK, opsize=1, row=3), "names no channel"),
        (Instruction(Opcode.WR_ABK, gpr0=1, channel_mask=chmask(0, 1), row=3),
         "exactly one channel"),
        (Instruction(Opcode.RD_MEM, bank=0, row=0), "needs a channel index"),
        (Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=chmask(0, 1), row=3),
         "channel 1 outside"),
    ]
    for inst, message in bad:
        before = snapshot(model)
        with pytest.raises(ProtocolError, match=message):
            model.run([inst])
        assert_unchanged(model, before)


# --------------------------------------------------------------------------- instructions


def test_gpr_cfr_and_ewadd_lines(model: FunctionalModel) -> None:
    rng = np.random.default_rng(8)
    x, y = bf16(rng, 2, LANES), bf16(rng, 2, LANES)
    program = [Instruction(Opcode.WR_GPR, gpr=10 + i, data=x[i]) for i in range(2)]
    program += [Instruction(Opcode.WR_GPR, gpr=20 + i, data=y[i]) for i in range(2)]
    program += [Instruction(Opcode.EWADD, opsize=2, gpr0=10, gpr1=20),
                Instruction(Opcode.RD_GPR, gpr=11), Instruction(Opcode.RD_GPR, gpr=99),
                Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=5)]
    out = model.run(program)
    assert out[0] == Readout(None, Opcode.RD_GPR, out[0].data)
    assert np.array_equal(out[0].data, dp.add(x[1], y[1]))
    assert (out[1].data == 0).all()  # never-written GPR
    assert np.array_equal(model.gprs[10], dp.add(x[0], y[0]))
    assert all(st.cfr[Cfr.AFM] == 5 for st in model.channels)


def test_read_results_land_in_consecutive_gprs(model: FunctionalModel) -> None:
    rng = np.random.default_rng(9)
    biases = bf16(rng, 3, LANES)
    program = [Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=chmask(c), data=biases[i])
               for i, c in enumerate((4, 9, 30))]
    program.append(Instruction(Opcode.RD_MAC, gpr0=40, channel_mask=chmask(4, 9, 30)))
    out = model.run(program)
    assert [r.channel for r in out] == [30, 9, 4]  # the simulator's send order
    for i, c in enumerate((4, 9, 30)):
        assert np.array_equal(model.gprs[40 + i], biases[i])
        assert np.array_equal(next(r.data for r in out if r.channel == c), biases[i])


def test_run_opens_and_switches_rows_like_a_controller(model: FunctionalModel) -> None:
    rng = np.random.default_rng(10)
    words = bf16(rng, LANES)
    out = model.run([
        Instruction(Opcode.WR_MEM, channel=6, bank=3, row=12, col=4, data=words),
        Instruction(Opcode.RD_SBK, gpr0=0, channel_mask=chmask(6), bank=3, row=12, col=4),
        Instruction(Opcode.COPY_BKGB, opsize=1, channel_mask=chmask(6), bank=3, row=12, col=4),
        Instruction(Opcode.COPY_GBBK, opsize=1, channel_mask=chmask(6), bank=3, row=13, col=4),
        Instruction(Opcode.WR_GB, opsize=1, gpr0=0, channel_mask=chmask(6), col=4),
        Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=chmask(6), row=13, col=4),
        Instruction(Opcode.RD_MEM, channel=6, bank=3, row=12, col=4),
    ])
    assert [r.opcode for r in out] == [Opcode.RD_SBK, Opcode.RD_MEM]
    assert np.array_equal(out[0].data, words) and np.array_equal(out[1].data, words)
    assert np.array_equal(model.peek(6, 3, 13)[4], words)
    acc = model.channels[6].acc
    assert acc[3] == dp.mac(np.uint32(0), words, words) and (np.delete(acc, 3) == 0).all()
    assert model.channels[6].open_rows.tolist() == [13] * 3 + [12] + [13] * 12


def test_af_and_ewmul_instructions(model: FunctionalModel) -> None:
    rng = np.random.default_rng(11)
    a, b = bf16(rng, LANES), bf16(rng, LANES)
    biases = dp.to_bf16(rng.uniform(-3, 3, BANKS))
    out = model.run([
        Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=chmask(1), bank=4, row=2, col=0,
                    data=a),
        Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=chmask(1), bank=5, row=2, col=0,
                    data=b),
        Instruction(Opcode.EWMUL, opsize=1, channel_mask=chmask(1), row=2),
        Instruction(Opcode.RD_SBK, gpr0=0, channel_mask=chmask(1), bank=6, row=2),
        Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=chmask(1), data=biases),
        Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=0),
        Instruction(Opcode.AF, channel_mask=chmask(1)),
        Instruction(Opcode.RD_AF, gpr0=0, channel_mask=chmask(1)),
    ])
    assert np.array_equal(out[0].data, dp.mul(a, b))
    assert np.array_equal(out[1].data, dp.af(dp.bias(biases), dp.af_lut(0)))
    assert (model.channels[1].open_rows == AF_ROW_BASE).all()


def test_multi_column_instructions_equal_their_commands() -> None:
    # run() executes MAC_ABK and EWMUL over all channels and columns in one vectorised pass;
    # the result must equal issuing the DRAM commands one by one, per-channel CFRs included.
    rng = np.random.default_rng(15)
    fast, slow = FunctionalModel(), FunctionalModel()
    channels = (0, 5, 6)
    rows = {c: bf16(rng, BANKS, COLS, LANES) for c in channels}
    vectors = {c: bf16(rng, 2, LANES) for c in channels}
    for m in (fast, slow):
        for c in channels:
            for b in range(BANKS):
                m.poke(c, b, 9, rows[c][b])
            m.execute(c, C.WRGB, col=3, data=vectors[c][0])
            m.execute(c, C.WRGB, col=4, data=vectors[c][1])
        m.set_cfr(Cfr.BROADCAST, 1, channels=[5])
        m.set_cfr(Cfr.EWMUL_BG, 0, channels=[6])
    fast.run([Instruction(Opcode.MAC_ABK, opsize=2, channel_mask=chmask(*channels), row=9,
                          col=3),
              Instruction(Opcode.EWMUL, opsize=5, channel_mask=chmask(*channels), row=9,
                          col=1)])
    for c in channels:
        slow.execute(c, C.ACT16, row=9)
        for col in (3, 4):
            slow.execute(c, C.MAC16, col=col)
        for col in range(1, 6):
            slow.execute(c, C.EWMUL16, col=col)
    for c in channels:
        assert np.array_equal(fast.channels[c].acc, slow.channels[c].acc)
        assert fast.channels[c].acc.any()
        for b in range(BANKS):
            assert np.array_equal(fast.peek(c, b, 9), slow.peek(c, b, 9))
    assert (fast.channels[5].acc[1::2] == 0).all()  # BROADCAST = 1: odd banks idle


def test_public_traces_run(traces_dir) -> None:
    from patton.sim import trace

    model = FunctionalModel()
    out = model.run(trace.read(traces_dir / "all_isr.trace"))
    # RD_MAC and RD_AF on 4 channels, 8 RD_SBK.
    assert [r.opcode for r in out].count(Opcode.RD_MAC) == 4
    assert [r.opcode for r in out].count(Opcode.RD_AF) == 4
    assert [r.opcode for r in out].count(Opcode.RD_SBK) == 8
    # Its payloads are unknown (zeros), so every value read is zero except the AF results:
    # AFM 1 is tanh, tanh(0) = 0, too.
    assert all((r.data == 0).all() for r in out)
    # the probes: one readout per read instruction, in program order, none for the rest
    reads = {Opcode.RD_MAC, Opcode.RD_AF, Opcode.RD_SBK, Opcode.RD_MEM}
    expected = {"probe_gemv": 1, "probe_block": 1, "probe_misc": 1, "probe_af": 1,
                "probe_act": 7, "probe_2ch": 0}
    for name, count in expected.items():
        program = list(trace.read(traces_dir / f"{name}.trace"))
        out = FunctionalModel().run(program)
        assert [(r.index, r.opcode) for r in out] == [
            (i, ins.opcode) for i, ins in enumerate(program) if ins.opcode in reads], name
        assert len(out) == count, name


def test_gemv_on_two_channels_matches_numpy(model: FunctionalModel) -> None:
    # y = W x with K = 1024: output o = 48 c + 16 r + b lives in channel c, bank b, row r.
    rng = np.random.default_rng(12)
    channels, rows, k = (3, 17), 3, COLS * LANES
    w = bf16(rng, len(channels) * rows * BANKS, k)
    x = bf16(rng, k)
    for ci, c in enumerate(channels):
        for r in range(rows):
            for b in range(BANKS):
                model.poke(c, b, 100 + r, w[ci * 48 + r * 16 + b].reshape(COLS, LANES))
    program = [Instruction(Opcode.WR_GB, opsize=COLS, gpr0=0, channel_mask=chmask(*channels),
                           data=x)]
    for r in range(rows):
        program += [
            Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=chmask(*channels),
                        data=np.zeros(LANES, np.uint16)),
            Instruction(Opcode.MAC_ABK, opsize=COLS, channel_mask=chmask(*channels),
                        row=100 + r),
            Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=chmask(*channels)),
        ]
    out = model.run(program)
    y = np.zeros(len(channels) * rows * BANKS, np.uint16)
    for i, read in enumerate(out):
        r = i // len(channels)
        y[channels.index(read.channel) * 48 + r * 16:][:16] = read.data
    # Bit-exact against the datapath ...
    wb = w.reshape(-1, COLS, LANES)
    xb = np.broadcast_to(x.reshape(COLS, LANES), wb.shape)
    assert np.array_equal(y, dp.readout(dp.accumulate(np.zeros(len(y), np.uint32), wb, xb)))
    # ... and within the stated tolerance of float64.
    wf, xf = dp.from_bf16(w), dp.from_bf16(x)
    exact, scale = wf @ xf, np.abs(wf) @ np.abs(xf)
    err = np.abs(dp.from_bf16(y) - exact)
    assert np.all(err <= 2.0 ** -8 * np.abs(exact) + COLS * 2.0 ** -23 * scale)


def test_attention_qk_and_sv_match_numpy(model: FunctionalModel) -> None:
    # One head, d = 128 (8 columns), 256 tokens in 16-token blocks, on channel 2.
    rng = np.random.default_rng(13)
    d, tokens, ch = 128, 256, 2
    dcols = d // LANES
    q = bf16(rng, d)
    keys = bf16(rng, tokens, d)
    values = bf16(rng, tokens, d)
    scores_in = dp.to_bf16(rng.uniform(0, 1, tokens) / 16)

    # Keys: token t of block n lives in bank t % 16, row 40 + n // 8, columns 8 (n % 8) + ...
    program = []
    for t in range(tokens):
        n, b = divmod(t, BANKS)
        for j in range(dcols):
            program.append(Instruction(Opcode.WR_MEM, channel=ch, bank=b, row=40 + n // 8,
                                       col=8 * (n % 8) + j,
                                       data=keys[t, LANES * j:LANES * (j + 1)]))
    # QK^T: the query repeated at every block's column offset.
    program.append(Instruction(Opcode.WR_GB, opsize=COLS, gpr0=0, channel_mask=chmask(ch),
                               data=np.tile(q, COLS // dcols)))
    for n in range(tokens // BANKS):
        program += [
            Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=chmask(ch),
                        data=np.zeros(LANES, np.uint16)),
            Instruction(Opcode.MAC_ABK, opsize=dcols, channel_mask=chmask(ch),
                        row=40 + n // 8, col=8 * (n % 8)),
            Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=chmask(ch)),
        ]
    out = model.run(program)
    scores = np.concatenate([r.data for r in out])
    kf, qf = dp.from_bf16(keys), dp.from_bf16(q)
    exact, scale = kf @ qf, np.abs(kf) @ np.abs(qf)
    assert np.all(np.abs(dp.from_bf16(scores) - exact)
                  <= 2.0 ** -8 * np.abs(exact) + dcols * 2.0 ** -23 * scale)
    kb = keys.reshape(tokens, dcols, LANES)
    qb = np.broadcast_to(q.reshape(dcols, LANES), kb.shape)
    assert np.array_equal(scores, dp.readout(dp.accumulate(np.zeros(tokens, np.uint32),
                                                           kb, qb)))

    # SV: dimension 16 g + b in bank b of row 80 + g; token t at column t // 16, lane t % 16,
    # written one token at a time with WR_ABK and a one-lane mask.
    program = []
    for t in range(tokens):
        for g in range(dcols):
            program.append(Instruction(Opcode.WR_ABK, gpr0=0, channel_mask=chmask(ch),
                                       row=80 + g, col=t // LANES, mask=1 << (t % LANES),
                                       data=values[t, LANES * g:LANES * (g + 1)]))
    program.append(Instruction(Opcode.WR_GB, opsize=tokens // LANES, gpr0=0,
                               channel_mask=chmask(ch), data=scores_in))
    for g in range(dcols):
        program += [
            Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=chmask(ch),
                        data=np.zeros(LANES, np.uint16)),
            Instruction(Opcode.MAC_ABK, opsize=tokens // LANES, channel_mask=chmask(ch),
                        row=80 + g),
            Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=chmask(ch)),
        ]
    out = model.run(program)
    result = np.concatenate([r.data for r in out])
    vf, pf = dp.from_bf16(values), dp.from_bf16(scores_in)
    exact, scale = pf @ vf, np.abs(pf) @ np.abs(vf)
    steps = tokens // LANES
    assert np.all(np.abs(dp.from_bf16(result) - exact)
                  <= 2.0 ** -8 * np.abs(exact) + steps * 2.0 ** -23 * scale)
    vb = values.T.reshape(d, steps, LANES)
    pb = np.broadcast_to(scores_in.reshape(steps, LANES), vb.shape)
    assert np.array_equal(result, dp.readout(dp.accumulate(np.zeros(d, np.uint32), vb, pb)))


# --------------------------------------------------------------------------- memory footprint


def test_sparse_memory_stays_small() -> None:
    tracemalloc.start()
    try:
        model = FunctionalModel()
        rng = np.random.default_rng(14)
        program = []
        for c in range(DEVICE.channels):
            for row in (0, DEVICE.rows - 1):
                program.append(Instruction(Opcode.WR_MEM, channel=c, bank=c % BANKS, row=row,
                                           col=c % COLS, data=bf16(rng, LANES)))
            program.append(Instruction(Opcode.RD_MEM, channel=c, bank=1, row=500))
            program.append(Instruction(Opcode.MAC_ABK, opsize=COLS, channel_mask=chmask(c),
                                       row=777))
            # Writes that leave unwritten memory as it was (zeros) allocate nothing.
            program.append(Instruction(Opcode.WR_MEM, channel=c, bank=2, row=900))
            program.append(Instruction(Opcode.EWMUL, opsize=COLS, channel_mask=chmask(c),
                                       row=901))
        out = model.run(program)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all((r.data == 0).all() for r in out)  # unwritten memory reads as zero
    row_bytes = BANKS * COLS * LANES * 2  # one row in all 16 banks: 32 KiB
    assert model.footprint() == DEVICE.channels * 2 * row_bytes  # only the written rows
    assert peak < 8 * 2 ** 20  # a 16 GiB device in a few MiB
    assert model.peek(31, 15, DEVICE.rows - 1)[31].any()


def test_mac16_run_equals_one_execute_per_column() -> None:
    """A schedule's MAC16 stream in one vectorised pass (``mac16_run``, what ``replay`` uses)
    gives the accumulators of one ``execute`` per column, columns repeated and out of order
    included, under both BROADCAST values; an illegal column stops it there, unchanged after."""
    rng = np.random.default_rng(11)
    columns = [int(c) for c in rng.integers(0, 64, 40)] + [3, 3, 63, 0]
    for broadcast in (0, 1):
        models = [FunctionalModel(DEVICE.with_(channels=1)) for _ in range(2)]
        for model in models:
            for bank in range(16):
                model.poke(0, bank, 2, rng.integers(0x3C00, 0x4000, (64, 16)).astype(np.uint16)
                           if model is models[0] else models[0].peek(0, bank, 2))
            model.set_cfr(Cfr.BROADCAST, broadcast)
            model.execute(0, Command.ACT16, row=2)
        models[0].channels[0].gb[:] = rng.integers(0x3C00, 0x4000, (64, 16))  # backdoor
        models[1].channels[0].gb[:] = models[0].channels[0].gb
        one, run = models
        for c in columns:
            one.execute(0, Command.MAC16, col=c, row=2)
        run.mac16_run(0, 2, columns)
        assert np.array_equal(one.channels[0].acc, run.channels[0].acc)
        before = run.channels[0].acc.copy()
        with pytest.raises(ProtocolError):
            run.mac16_run(0, 2, [5, 64, 6])  # column 64 is outside the row: 5 runs, then stop
        one.execute(0, Command.MAC16, col=5, row=2)
        assert np.array_equal(one.channels[0].acc, run.channels[0].acc)
        assert not np.array_equal(before, run.channels[0].acc)
