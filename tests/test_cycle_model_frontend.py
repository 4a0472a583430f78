"""The opt-in per-channel front end (``CycleModel(frontend="per_channel")``).

Where a program leaves the per-channel decoders nothing to do in parallel (every DRAM
instruction on one channel, or every one on all channels) it runs exactly as under the
shared front end; the kernel equals the Python model under it; a program split into
one-channel instructions without barriers runs each channel as if it ran alone; SYNC, EOC and
the blocking reads keep the shared DMA's cross-channel order; and splitting the decoder never
costs cycles on split programs, and saves most of them where the shared decoder is the limit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.sim import native, trace
from patton.sim.cost_cache import CostCache
from patton.sim.cycle_model import FRONTENDS, CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.executor import CycleExecutor
from patton.sim.isa import Cfr, Instruction, Opcode, channel_bit, mask_channels
from patton.sim.program import Program
from patton.sim.random_programs import KINDS, random_program
from patton.sim.timing import PROFILES
from test_cycle_model_native import _signature, _state

PER_CHANNEL = "per_channel"
_MULTICAST_KINDS = tuple(k for k in KINDS if k not in ("rd_mem", "wr_mem"))
_ALL = (1 << 32) - 1  # a mask selecting every channel


def _on_channel(program: list[Instruction], channel: int) -> list[Instruction]:
    """``program`` (built on channel 0) moved to ``channel``."""
    out = []
    for ins in program:
        if ins.opcode in (Opcode.RD_MEM, Opcode.WR_MEM):
            ins = dataclasses.replace(ins, channel=channel)
        elif ins.channel_mask is not None:
            ins = dataclasses.replace(ins, channel_mask=channel_bit(channel))
        out.append(ins)
    return out


def _split(program: list[Instruction]) -> list[Instruction]:
    """Every multicast instruction as one instruction per channel, in its send order."""
    out = []
    for ins in program:
        if ins.channel_mask is not None and ins.opcode.info.final is not None:
            out.extend(dataclasses.replace(ins, channel_mask=channel_bit(c))
                       for c in mask_channels(ins.channel_mask))
        else:
            out.append(ins)
    return out


def _addresses(ins: Instruction, channel: int) -> bool:
    """True if ``ins`` is for ``channel`` under the per-channel front end."""
    if ins.opcode.info.final is None or ins.opcode in (Opcode.SYNC, Opcode.EOC):
        return True
    return channel in ins.channels()


def _alike_state(rng: np.random.Generator) -> DeviceState:
    """A random start state that is the same on every channel."""
    one = _state(rng)
    return DeviceState((one.open_rows[0],) * DEVICE.channels,
                       (one.reg_mode[0],) * DEVICE.channels, one.cfr)


def _both(program, state=None, **options):
    """The signatures under the shared and the per-channel front end."""
    return (_signature(CycleModel(record=True, **options).run(program, state)),
            _signature(CycleModel(record=True, frontend=PER_CHANNEL, **options)
                       .run(program, state)))


# -- where the per-channel front end has nothing to do in parallel ----------------------------

@pytest.mark.parametrize("native", [True, False], ids=["kernel", "python"])
@pytest.mark.parametrize("seed", range(16))
def test_one_channel_programs_run_as_under_the_shared_front_end(seed, native):
    """Every DRAM instruction on one channel (any channel; SYNC and EOC still go to all 32):
    cycles, counts, bank-state cycles, schedules and end states are the shared ones."""
    rng = np.random.default_rng(seed)
    program = _on_channel(random_program(rng, int(rng.integers(5, 80)), channels=1,
                                         rows=int(rng.integers(1, 5)), data=bool(seed % 2)),
                          int(rng.integers(DEVICE.channels)))
    state = _state(rng) if seed % 3 == 0 else None
    shared, per_channel = _both(program, state, native=native, drain=bool(seed % 2),
                                timing=PROFILES[seed % len(PROFILES)])
    assert per_channel == shared


@pytest.mark.parametrize("native", [True, False], ids=["kernel", "python"])
@pytest.mark.parametrize("seed", range(12))
def test_all_channel_programs_run_as_under_the_shared_front_end(seed, native):
    """Every instruction multicast to all channels, from a state alike on every channel
    (grouped or not): the same as the shared front end, schedules included."""
    rng = np.random.default_rng(100 + seed)
    program = [dataclasses.replace(ins, channel_mask=_ALL) if ins.channel_mask is not None
               else ins
               for ins in random_program(rng, int(rng.integers(5, 60)), channels=4,
                                         rows=int(rng.integers(1, 5)), data=bool(seed % 2),
                                         kinds=_MULTICAST_KINDS)]
    state = _alike_state(rng) if seed % 2 else None
    for group in (True, False):
        shared, per_channel = _both(program, state, native=native, group=group,
                                    drain=bool(seed % 3 == 0))
        assert per_channel == shared


# -- the kernel against the Python model ------------------------------------------------------

@pytest.mark.parametrize("seed", range(40))
def test_kernel_equals_python_under_the_per_channel_front_end(seed):
    """Random programs of every kind on 1 to 32 channels (as they come and split into
    one-channel instructions), random start states, both profiles, drained or not: the kernel
    (grouped and not, from instructions and from columns) and the Python model with its
    shortcuts report what plain Python stepping reports."""
    rng = np.random.default_rng(seed)
    channels = int(rng.choice([1, 2, 4, 8, 32]))
    program = random_program(rng, int(rng.integers(5, 80)), channels=channels,
                             rows=int(rng.integers(1, 5)), data=bool(seed % 2))
    if seed % 4 == 1:
        program = _split(program)
    state = _state(rng) if seed % 3 == 0 else None
    options = {"timing": PROFILES[seed % len(PROFILES)], "record": True,
               "drain": bool(seed % 2), "frontend": PER_CHANNEL}
    plain = _signature(CycleModel(native=False, skip=False, group=False, **options)
                       .run(program, state))
    assert _signature(CycleModel(native=False, **options).run(program, state)) == plain
    for group in (True, False):
        for form in (program, Program.of(program)):
            assert _signature(CycleModel(group=group, **options).run(form, state)) == plain


@pytest.mark.parametrize("kind", KINDS)
def test_kernel_on_each_instruction_kind_per_channel(kind):
    """Long runs of one kind (buffers full, refused sends retried) on 4 channels, split."""
    kinds = (kind, "sync") if kind != "sync" else ("sync",)
    program = _split(random_program(np.random.default_rng(7), 60, channels=4, rows=3,
                                    kinds=kinds))
    options = {"record": True, "frontend": PER_CHANNEL}
    assert _signature(CycleModel(**options).run(program)) == \
        _signature(CycleModel(native=False, **options).run(program))


def test_kernel_on_the_split_macab_trace_per_channel(traces_dir):
    """The MAC_ABK trace split into one instruction per channel, rows differing per channel."""
    public = trace.read(traces_dir / "micro_macab_1024_16banks.trace").to_instructions()
    split = [dataclasses.replace(ins, channel_mask=channel_bit(c), row=(ins.row + 37 * c) % 64)
             for ins in public[:24] for c in range(32)] + [public[-1]]
    options = {"record": True, "frontend": PER_CHANNEL}
    assert _signature(CycleModel(**options).run(split)) == \
        _signature(CycleModel(native=False, **options).run(split))


# -- channel independence and what it saves ---------------------------------------------------

def _entries(schedule, channel):
    return [(c.cycle, c.command, c.bank, c.row, c.col, c.cfr, c.mask,
             None if c.payload is None else c.payload.tobytes())
            for c in schedule if c.channel == channel]


@pytest.mark.parametrize("native", [True, False], ids=["kernel", "python"])
@pytest.mark.parametrize("seed", range(10))
def test_split_programs_run_each_channel_as_if_alone(seed, native):
    """With one-channel instructions and no barrier (SYNC, RD_MAC, RD_AF), each channel's
    commands, schedule and counts are those of its own sub-program run alone (shared front
    end, drained); the run lasts as long as the longest of them, and a channel that finished
    earlier only adds idle cycles (active or precharged as it was left)."""
    rng = np.random.default_rng(200 + seed)
    channels = int(rng.choice([2, 4, 8]))
    program = _split(random_program(rng, int(rng.integers(10, 60)), channels=channels,
                                    rows=int(rng.integers(1, 5)), data=True,
                                    kinds=tuple(k for k in KINDS
                                                if k not in ("sync", "rd_mac", "rd_af"))))
    state = _state(rng) if seed % 2 else None
    together = CycleModel(record=True, drain=True, native=native, frontend=PER_CHANNEL) \
        .run(program, state)
    ends = []
    for c in range(channels):
        alone = CycleModel(record=True, drain=True, native=native) \
            .run([ins for ins in program if _addresses(ins, c)], state)
        ends.append(alone.cycles)
        assert together.command_counts.get(c) == alone.command_counts.get(c)
        assert _entries(together.schedule, c) == _entries(alone.schedule, c)
        assert together.state.open_rows[c] == alone.state.open_rows[c]
        assert together.state.reg_mode[c] == alone.state.reg_mode[c]
        extra = together.cycles - alone.cycles
        mine, solo = together.bank_state_cycles[c], alone.bank_state_cycles[c]
        assert mine["idle"] - solo["idle"] == extra
        assert (mine["active"] - solo["active"], mine["precharged"] - solo["precharged"]) in \
            ((extra, 0), (0, extra))
    assert together.cycles == max(ends)


@pytest.mark.parametrize("seed", range(30))
def test_per_channel_costs_no_more_cycles_on_split_programs(seed):
    """Split random programs: per-channel decoding takes at most the shared cycles (on these
    seeds; it is not a law, see the next test)."""
    rng = np.random.default_rng(300 + seed)
    program = _split(random_program(rng, int(rng.integers(5, 80)),
                                    channels=int(rng.choice([2, 4, 8, 32])),
                                    rows=int(rng.integers(1, 5))))
    for drain in (False, True):
        assert CycleModel(drain=drain, frontend=PER_CHANNEL).run(program).cycles <= \
            CycleModel(drain=drain).run(program).cycles


def test_earlier_requests_can_cost_cycles():
    """Not a law: here channel 3's R MEM is activated earlier under per-channel decoding, so
    it becomes ready while the RD_MAC's TMOD has just switched the channel to register mode;
    the active buffer goes first and the channel switches modes twice more (445 cycles, 352
    shared)."""
    rng = np.random.default_rng(188)
    channels = int(rng.choice([2, 4, 8, 32]))
    program = _split(random_program(rng, int(rng.integers(5, 80)), channels=channels,
                                    rows=int(rng.integers(1, 5))))
    shared = CycleModel(record=True).run(program)
    per_channel = CycleModel(record=True, frontend=PER_CHANNEL).run(program)
    assert (shared.cycles, per_channel.cycles) == (352, 445)
    modes = [[c.cycle for c in r.schedule if c.channel == 3 and c.command.name == "TMOD"]
             for r in (shared, per_channel)]
    assert len(modes[1]) == len(modes[0]) + 2


def test_per_channel_decodes_front_end_bound_programs_in_parallel():
    """2,048 one-channel W MEMs spread over 32 channels (a Value-cache token write's shape):
    the shared decoder takes one per cycle, the per-channel ones 32 per cycle."""
    program = [Instruction(Opcode.WR_MEM, channel=c, bank=b, row=0, col=col)
               for col in range(4) for b in range(16) for c in range(32)]
    program.append(Instruction(Opcode.EOC))
    shared = CycleModel().run(program)
    per_channel = CycleModel(frontend=PER_CHANNEL).run(program)
    assert shared.cycles > len(program)  # one instruction per cycle, then the last writes
    assert per_channel.cycles * 8 < shared.cycles
    assert per_channel.command_counts == shared.command_counts
    assert CycleModel(native=False, frontend=PER_CHANNEL).run(program).cycles == \
        per_channel.cycles


@pytest.mark.parametrize("native", [True, False], ids=["kernel", "python"])
def test_sync_and_blocking_reads_keep_their_cross_channel_order(native):
    """Long MAC_ABKs on channel 0, an instruction for channel 0, then work for channel 1:
    after a non-blocking one channel 1 starts at once; after an RD_MAC it starts only once the
    read came back (as under the shared DMA), after a SYNC once channel 0 is done."""
    mac = [Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=channel_bit(0), row=r)
           for r in range(4)]
    between = {"wr_bias": Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=channel_bit(0)),
               "rd_mac": Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=channel_bit(0)),
               "sync": Instruction(Opcode.SYNC)}
    other = Instruction(Opcode.MAC_ABK, opsize=1, channel_mask=channel_bit(1), row=0)
    first, last_0, read = {}, {}, {}
    for name, ins in between.items():
        for frontend in ("shared", PER_CHANNEL):
            program = mac + [ins, other, Instruction(Opcode.EOC)]
            out = CycleModel(record=True, native=native, frontend=frontend) \
                .run(program).schedule
            first[name, frontend] = min(c.cycle for c in out if c.channel == 1)
            last_0[name, frontend] = max(c.cycle for c in out if c.channel == 0)
            read[name, frontend] = [c.cycle for c in out if c.command.name == "RDMAC16"]
    assert first["wr_bias", PER_CHANNEL] < 20 < last_0["wr_bias", PER_CHANNEL]
    assert first["wr_bias", "shared"] > 20
    for frontend in ("shared", PER_CHANNEL):
        assert first["rd_mac", frontend] > read["rd_mac", frontend][0]
        assert first["sync", frontend] > last_0["sync", frontend]
    assert first["rd_mac", PER_CHANNEL] == first["rd_mac", "shared"]
    assert first["sync", PER_CHANNEL] == first["sync", "shared"]


def test_cfr_values_apply_in_program_order():
    """An AF on channel 1 after a W CFR AFM reads the LUT row of the new mode, though channel
    1's decoder reaches it long before channel 0's reaches the W CFR's neighbours."""
    program = [Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=channel_bit(0), row=r)
               for r in range(3)]
    program += [Instruction(Opcode.WR_CFR, cfr=int(Cfr.AFM), value=5),
                Instruction(Opcode.AF, channel_mask=channel_bit(1)), Instruction(Opcode.EOC)]
    for native_ in (True, False):
        result = CycleModel(record=True, native=native_, frontend=PER_CHANNEL).run(program)
        rows = {c.row for c in result.schedule if c.channel == 1 and c.command.name == "AF16"}
        assert rows == {(1 << 29) + 5}
        assert result.state.cfr[Cfr.AFM] == 5


# -- options --------------------------------------------------------------------------------

def test_a_bad_front_end_is_refused():
    with pytest.raises(ValueError, match="choices: shared, per_channel"):
        CycleModel(frontend="per-channel")
    with pytest.raises(ValueError, match="choices: shared, per_channel"):
        CycleExecutor(frontend="dma")
    assert FRONTENDS == ("shared", "per_channel") == native.FRONTENDS
    assert CycleModel().frontend == "shared"


def test_the_executor_passes_the_front_end_on():
    program = _split(random_program(np.random.default_rng(4), 30, channels=8, rows=2))
    executor = CycleExecutor(record=False, frontend=PER_CHANNEL)
    assert executor.cycle_model.frontend == PER_CHANNEL
    assert executor.run(program).cycles == \
        CycleModel(drain=True, frontend=PER_CHANNEL).run(program).cycles


def test_cost_cache_keys_hold_the_front_end():
    """The same program and state key differently under the two front ends, and a
    per-channel cache reuses per-channel costs that equal a full per-channel run."""
    program = _split(random_program(np.random.default_rng(9), 40, channels=8, rows=3))
    state = DeviceState.reset()
    keys = {f: CostCache(CycleModel(frontend=f))._key(Program.of(program), state)[0]
            for f in FRONTENDS}
    assert keys["shared"] != keys[PER_CHANNEL]
    cache = CostCache(CycleModel(frontend=PER_CHANNEL), check=1.0)
    first, again = cache.run(program), cache.run(program)
    assert (cache.hits, cache.misses, cache.checked) == (1, 1, 1)
    full = CycleModel(frontend=PER_CHANNEL).run(program)
    for cost in (first, again):
        assert (cost.cycles, cost.command_counts, cost.bank_state_cycles, cost.state) == \
            (full.cycles, full.command_counts, full.bank_state_cycles, full.state)
    assert full.cycles < CycleModel().run(program).cycles
