"""``patton demo``: a GEMV on the AiM device model, checked against NumPy.

The weights are resident in DRAM (placed directly in the functional model's mats, as a serving
system keeps them); the program multicasts the input vector to every channel's global buffer
and runs WR_BIAS / MAC_ABK / RD_MAC per DRAM row. The cycle model times it (cycles, energy),
the functional model computes it with the documented bf16 datapath, and the result is compared
with a float64 GEMV.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from patton.sim import schedule, trace
from patton.sim.check import verify
from patton.sim.cycle_model import CycleModel
from patton.sim.device import DEVICE
from patton.sim.energy import energy
from patton.sim.functional import FunctionalModel
from patton.sim.random_programs import gemv_program


def _bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to bfloat16 bit patterns (RNE)."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def _float(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def gemv_demo(rows: int = 64, seed: int = 0, k: int = 1024, out: Path = Path("build/demo")
              ) -> int:
    """Run the demo; return 0 when the device result is within tolerance of float64."""
    dev = DEVICE
    channels = list(range(dev.channels))
    outputs = dev.channels * dev.banks * rows
    rng = np.random.default_rng(seed)
    weights = _bf16(rng.standard_normal((outputs, k)) / np.sqrt(k))
    vector = _bf16(rng.standard_normal(k))
    program = gemv_program(vector, rows, channels)

    started = time.perf_counter()
    timed = CycleModel(record=True).run(program)
    t_cycle = time.perf_counter() - started
    e = energy(timed.command_counts, timed.bank_state_cycles, timed.cycles)

    started = time.perf_counter()
    model = FunctionalModel(dev)
    per_bank = weights.reshape(dev.channels, dev.banks, rows, k)
    for c in channels:
        for b in range(dev.banks):
            for j in range(rows):
                model.poke(c, b, j, per_bank[c, b, j].reshape(-1, dev.lanes))
    readouts = model.run(program)
    t_func = time.perf_counter() - started

    y = np.zeros((dev.channels, dev.banks, rows))
    per_row = [r for r in readouts if r.opcode.name == "RD_MAC"]
    assert len(per_row) == rows * dev.channels
    for i, r in enumerate(per_row):
        y[r.channel, :, i // dev.channels] = _float(r.data)
    reference = _float(weights) @ _float(vector)
    error = np.abs(y.reshape(-1) - reference)
    tolerance = 2.0 ** -7 * np.abs(reference) + 2.0 ** -12
    ok = bool(np.all(error <= tolerance))

    out.mkdir(parents=True, exist_ok=True)
    trace.write(out / "gemv.trace", program)
    schedule.write(out / "gemv.schedule", timed.schedule)
    violations = verify(timed.schedule)
    flops = 2.0 * outputs * k
    ns = timed.cycles * dev.cycle_ns
    print(f"GEMV {outputs} x {k} (bf16) on {dev.channels} AiM channels x {dev.banks} banks, "
          f"{rows} DRAM rows per bank")
    print(f"  cycle model   {timed.cycles} cycles = {ns / 1000:.2f} us, {timed.commands} DRAM "
          f"commands, {flops / ns:.1f} GFLOP/s, {e.total / 1000:.1f} uJ "
          f"({t_cycle:.2f} s to simulate)")
    print(f"  schedule      {len(timed.schedule)} commands, {len(violations)} timing "
          f"violations -> {out / 'gemv.schedule'}")
    print(f"  functional    max |y - y_float64| = {error.max():.2e} over |y| <= "
          f"{np.abs(reference).max():.2f}, worst error / tolerance = "
          f"{(error / tolerance).max():.2f} ({t_func:.2f} s to compute)")
    print(f"  check         {'PASS' if ok and not violations else 'FAIL'}: every output within "
          "2^-7 relative + 2^-12 absolute of float64 (bf16 output rounding)")
    return 0 if ok and not violations else 1
