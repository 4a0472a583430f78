"""The compiled cycle kernel against the Python cycle model, cycle for cycle."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from patton.sim import native, trace
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.program import Program
from patton.sim.random_programs import KINDS, random_program
from patton.sim.timing import PROFILES


def _signature(result):
    """Everything a run reports, schedule entries with the data they carry."""
    schedule = [(c.cycle, c.channel, c.command, c.bank, c.row, c.col, c.source, c.cfr, c.mask,
                 None if c.payload is None else c.payload.tobytes()) for c in result.schedule]
    return (result.cycles, result.command_counts, result.bank_state_cycles, schedule,
            result.state)


def _state(rng: np.random.Generator) -> DeviceState:
    rows = tuple(tuple(int(r) for r in rng.choice([-1, 0, 1, 2], size=DEVICE.banks))
                 if rng.random() < 0.5 else (-1,) * DEVICE.banks for _ in range(DEVICE.channels))
    modes = tuple(bool(rng.random() < 0.3) for _ in range(DEVICE.channels))
    cfr = (int(rng.integers(0, 2)), int(rng.integers(0, 2)), int(rng.integers(0, 8)))
    return DeviceState(rows, modes, cfr)


@pytest.mark.parametrize("seed", range(60))
def test_kernel_equals_plain_python_stepping(seed):
    """Random programs of every kind (a quarter with column instructions wider than a row), from
    random start states, both profiles, drained or not: the kernel (grouped and not, from instructions and from columns) reports what the Python
    model reports when it ticks every controller every cycle."""
    rng = np.random.default_rng(seed)
    channels = int(rng.choice([1, 2, 4, 8, 32]))
    program = random_program(rng, int(rng.integers(5, 80)), channels=channels,
                             rows=int(rng.integers(1, 5)), data=bool(seed % 2),
                             wide=seed % 4 == 1)  # columns past the row wrap (docs/isa.md)
    state = _state(rng) if seed % 3 == 0 else None
    options = {"timing": PROFILES[seed % len(PROFILES)], "record": True,
               "drain": bool(seed % 2)}
    plain = _signature(CycleModel(native=False, skip=False, group=False, **options)
                       .run(program, state))
    for group in (True, False):
        for form in (program, Program.of(program)):
            assert _signature(CycleModel(group=group, **options).run(form, state)) == plain


@pytest.mark.parametrize("kind", KINDS)
def test_kernel_on_each_instruction_kind(kind):
    """Long runs of one kind (buffers full, refused sends retried) on 4 channels."""
    kinds = (kind, "sync") if kind != "sync" else ("sync",)
    program = random_program(np.random.default_rng(7), 60, channels=4, rows=3, kinds=kinds)
    plain = _signature(CycleModel(native=False, record=True).run(program))
    assert _signature(CycleModel(record=True).run(program)) == plain


def test_kernel_on_per_channel_instructions(traces_dir):
    """The MAC_ABK trace split into one instruction per channel, rows differing per channel:
    every channel is its own controller (no grouping possible)."""
    public = trace.read(traces_dir / "micro_macab_1024_16banks.trace").to_instructions()
    split = [dataclasses.replace(ins, channel_mask=channel_bit(c), row=(ins.row + 37 * c) % 64)
             for ins in public[:24] for c in range(32)] + [public[-1]]
    assert _signature(CycleModel(record=True).run(split)) == \
        _signature(CycleModel(native=False, record=True).run(split))


def test_kernel_build_is_cached_by_source_hash():
    lib = native.library()
    assert native.library() is lib  # loaded once per process
    built = list((native.BUILD_ROOT / "native").glob("cycle_kernel-*.so"))
    assert built, "the kernel is built under build/native/"


def test_kernel_reports_a_stall(monkeypatch):
    """A run that cannot make progress ends with a clear error, not a hang."""
    monkeypatch.setattr(native, "STALL_LIMIT", 3)
    program = [Instruction(Opcode.MAC_ABK, opsize=4, channel_mask=channel_bit(0), row=1),
               Instruction(Opcode.EOC)]
    with pytest.raises(native.KernelError, match="stalled"):
        CycleModel().run(program)


def test_kernel_progress_is_reported(monkeypatch):
    """Long runs call back (every 2^20 cycles, passed on about once a second)."""
    seen = []
    run = native.run

    def spy(*args, **kwargs):
        user = kwargs["progress"]
        kwargs["progress"] = lambda retired, cycle: (seen.append((retired, cycle)),
                                                     user(retired, cycle))
        return run(*args, **kwargs)

    monkeypatch.setattr(native, "run", spy)
    program = [Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=channel_bit(0), row=r)
               for r in range(5000)] + [Instruction(Opcode.EOC)]
    calls = []
    result = CycleModel(progress=lambda *a: calls.append(a)).run(program)
    assert seen and all(0 < cycle < result.cycles and 0 <= retired <= len(program)
                        for retired, cycle in seen)
    assert all(total == len(program) for _, total, _ in calls)


def test_kernel_build_errors_are_clear(monkeypatch, tmp_path):
    """No compiler, a failing compiler, an unwritable build folder: KernelError naming it."""
    target = tmp_path / "native" / "k.so"
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(native.KernelError, match="cannot run the C compiler .*no-such-cc"):
        native._compile(target)
    failing = tmp_path / "failing-cc"
    failing.write_text("#!/bin/sh\necho 'fatal: broken' >&2\nexit 1\n")
    failing.chmod(0o755)
    monkeypatch.setenv("CC", str(failing))
    with pytest.raises(native.KernelError, match="fatal: broken"):
        native._compile(target)
    assert not target.exists()
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.delenv("CC")
    with pytest.raises(native.KernelError, match="cannot build the cycle kernel in .*file"):
        native._compile(blocker / "native" / "k.so")


@pytest.mark.parametrize("frontend", ["shared", "per_channel"])
@pytest.mark.parametrize("seed", range(4))
def test_kernel_on_deep_conventional_buffers(seed, frontend):
    """Hundreds of one-channel writes and reads on two banks and three rows of two channels:
    deep write and read buffers that wait on row conflicts, write-mode switches and refused
    sends, where the kernel skips requests an earlier scan found unready (cycle_kernel.c,
    ``scan_t``). Everything the Python model reports, cycle for cycle."""
    rng = np.random.default_rng(100 + seed)
    program = []
    for _ in range(300):
        write = rng.random() < 0.7
        program.append(Instruction(
            Opcode.WR_MEM if write else Opcode.RD_MEM, channel=int(rng.integers(2)),
            bank=int(rng.integers(2)), row=int(rng.integers(3)),
            col=int(rng.integers(DEVICE.columns)), data=np.zeros(16, np.uint16) if write else None))
    program.append(Instruction(Opcode.EOC))
    state = _state(rng) if seed % 2 else None
    options = {"record": True, "drain": True, "frontend": frontend}
    plain = _signature(CycleModel(native=False, skip=False, group=False, **options)
                       .run(program, state))
    assert _signature(CycleModel(**options).run(program, state)) == plain


@pytest.mark.parametrize("seed", range(40))
def test_kernel_decode_equals_the_python_decoded(seed):
    """The kernel's decoder gives every column Decoded gives (random programs of every kind,
    CFR writes among them, from random CFRs, on devices of 1 to 32 channels)."""
    rng = np.random.default_rng(seed)
    channels = int(rng.choice([1, 4, 8, 32]))
    device = dataclasses.replace(DEVICE, channels=channels) if channels != 32 else DEVICE
    program = Program.of(random_program(rng, int(rng.integers(1, 120)), device=device,
                                        channels=min(channels, 32), rows=4))
    from patton.sim.isa import Cfr

    cfr = {c: int(rng.integers(0, 4)) for c in Cfr}
    ref = native.Decoded(program, cfr, channels)
    got = native.decode(program, cfr, channels)
    for name in (*native.COLUMNS, "targets", "behaviour"):
        assert np.array_equal(getattr(got, name), getattr(ref, name)), name
    assert all(np.array_equal(got.cfr[c], ref.cfr[c]) for c in Cfr)
    assert got.end_cfr == ref.end_cfr and got.n == ref.n
