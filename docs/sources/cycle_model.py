"""``docs/cycle-model.md``'s measured numbers: the cycle model's speed next to the Python model
and the public C++ simulator, the decode step and cost reuse
(``benchmarks/cycle_model_speed.py``), and the cycle counts its prose quotes (a quick record).

The speed record runs the public simulator's binary, which is not in the repository: build it
from ``arkhadem/aim_simulator`` at 0f28a07 (CMake) and give its path in
``$AIM_SIMULATOR_BINARY`` when making the record (``python docs/measured.py --timed
cycle-model-speed``); ``benchmarks/aimsim_example.yaml`` is its configuration.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from patton.sim.timing import timing_table

from sources.common import ROOT, TIMED_DIR, Quick, Timed, record, span

_SPEED = "benchmarks/cycle_model_speed.py"

#: ``cycle_model_speed.py --json`` with the public simulator: its binary is
#: ``$AIM_SIMULATOR_BINARY`` on the machine that makes the record (``docs/measured.py`` names
#: it when unset), so the command names no machine path.
_WITH_REFERENCE = [_SPEED, "--json", "--reference-binary", "$AIM_SIMULATOR_BINARY",
                   "--reference-config", "benchmarks/aimsim_example.yaml"]

#: The Python model stepping every controller every cycle, against its two shortcuts, on the
#: MAC_ABK trace (one run each; JSON).
_SHORTCUTS = """
import json, time
from patton.sim import trace
from patton.sim.cycle_model import CycleModel
name = "micro_macab_1024_16banks"
program = trace.read(f"tests/data/aim/{name}.trace").to_instructions()
out = {"trace": name}
for label, options in (("plain", {"skip": False, "group": False}), ("shortcuts", {})):
    started = time.perf_counter()
    result = CycleModel(native=False, **options).run(program)
    out[label] = {"commands": result.commands, "cycles": result.cycles,
                  "seconds": time.perf_counter() - started}
assert out["plain"]["cycles"] == out["shortcuts"]["cycles"]
print(json.dumps(out))
"""

#: The figures the prose quotes (deterministic, a few seconds): the decode step under both
#: front ends, the tests' front-end and follow cases, a decode step's second QK^T and SV
#: following the first, and the bank-state quirk with a per-bank flag instead.
_FACTS = """
import json, sys
sys.path.insert(0, "tests")
import numpy as np
from patton.runtime.decode_batch import decode_steps, prefilled
from patton.sim import controller, native, trace
from patton.sim.cycle_model import CycleModel
from patton.sim.device import DEVICE
from patton.sim.isa import Instruction, Opcode
from patton.sim.random_programs import random_program
from test_cycle_model_follow import _decoded, meetings
from test_cycle_model_frontend import _split
out = {}
rt, next_id = prefilled(32, 2047)
*_, step = decode_steps(rt, 3, next_id)  # the speed benchmark's decode step
out["step"] = []
for name, program in zip(("writes", "qk", "sv"), step):
    shared, split = CycleModel().run(program), CycleModel(frontend="per_channel").run(program)
    out["step"].append({"program": name, "instructions": len(program),
                        "commands": shared.commands, "shared": shared.cycles,
                        "per_channel": split.cycles})
# test_per_channel_decodes_front_end_bound_programs_in_parallel's program
program = [Instruction(Opcode.WR_MEM, channel=c, bank=b, row=0, col=col)
           for col in range(4) for b in range(16) for c in range(32)]
program.append(Instruction(Opcode.EOC))
out["writes"] = {"instructions": len(program) - 1, "shared": CycleModel().run(program).cycles,
                 "per_channel": CycleModel(frontend="per_channel").run(program).cycles}
# test_earlier_requests_can_cost_cycles's program
rng = np.random.default_rng(188)
channels = int(rng.choice([2, 4, 8, 32]))
program = _split(random_program(rng, int(rng.integers(5, 80)), channels=channels,
                                rows=int(rng.integers(1, 5))))
out["seed188"] = {"shared": CycleModel().run(program).cycles,
                  "per_channel": CycleModel(frontend="per_channel").run(program).cycles}
# test_random_runs_meet's 40 draws
out["follow"] = {"met": meetings(40), "of": 40}
# the decode step's QK^T and SV again from the state they left (a GQA group's next head)
model = CycleModel()
state = model.run(step[0]).state
out["meet"] = []
for name, program in zip(("qk", "sv"), step[1:]):
    traced = model.run_decoded(program, _decoded(program, state), state, trace=True)
    again = traced.state
    followed = native.run(_decoded(program, again), DEVICE, model.timing,
                          [[c] for c in range(DEVICE.channels)], again.open_rows,
                          again.reg_mode, record=False, drain=model.drain,
                          frontend=model.frontend, follow=traced.trace)
    shift = followed.cycles - traced.cycles
    full = model.run(program, again).cycles
    assert followed.followed and followed.cycles == full
    out["meet"].append({"program": name, "cycles": full, "shift": shift,
                        "at": int(traced.trace.cycle[int(traced.trace.struct.matched)]) + shift})
# the bank-state quirk: the Python model with the open flag indexed by the bank itself
init = controller.ChannelController.__init__
def per_bank(self, *args, **kwargs):
    init(self, *args, **kwargs)
    self._per_group = self._full_mask.bit_length()
controller.ChannelController.__init__ = per_bank
name = "micro_wrgb_gbbk_bggb_16banks"
result = CycleModel(native=False).run(trace.read(f"tests/data/aim/{name}.trace")
                                      .to_instructions())
out["per_bank_flag"] = {"trace": name, "active": result.bank_state_cycles[0]["active"]}
print(json.dumps(out))
"""

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {"cycle-model-facts": Quick(["-c", _FACTS])}

#: Timed record name -> how it is made (wall times on this machine).
TIMED: dict[str, Timed] = {
    "cycle-model-speed": Timed(_WITH_REFERENCE),
    "cycle-model-frontend": Timed([_SPEED, "--tables", "frontend", "--repeat", "5", "--json"]),
    "cycle-model-shortcuts": Timed(["-c", _SHORTCUTS]),
}

#: Stored record name -> the file: the public simulator's results for its traces.
STORED = {"cycle-model-reference": ROOT / "tests" / "data" / "aim" / "reference.json"}


def _speed() -> dict:
    return record("cycle-model-speed")


def _facts() -> dict:
    return record("cycle-model-facts")


def _machine(name: str) -> str:
    """The machine a timed record was made on: ``2 CPUs``."""
    record(name)  # the same errors for a missing record
    return json.loads((TIMED_DIR / f"{name}.json").read_text())["machine"]


def _s(value: float) -> str:
    """A time as the tables have it: ``0.42 ms`` under 10 ms, ``0.013 s`` under a second, else
    ``1.31 s``."""
    if value < 0.01:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.3f} s" if value < 1 else f"{value:.2f} s"


def _ratio(value: float) -> str:
    """A ratio with two significant figures at least: ``8.2x``, ``23x``, ``0.12x``."""
    return f"{value:.2g}x" if value < 1 else f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


#: The per-channel-distinct traces' labels.
_SPLIT = {"micro_macab_1024_16banks per channel": "macab, one instruction per channel",
          "micro_ewmul_16banks per channel": "ewmul, one instruction per channel"}


def _rows() -> list[dict]:
    """Every row of the speed table: the public traces, then the per-channel ones."""
    return [*_speed()["traces"], *_speed()["per-channel"]]


def _speed_table() -> str:
    """The kernel, the Python model and (if measured) the public simulator, per trace."""
    ref = _speed()["reference"]
    head = ("| trace | DRAM commands | cycles | kernel, in process | Python model |"
            + (" public simulator, process | `patton aim run`, process | public / ours |"
               if ref else ""))
    lines = [head, "|---|---:|---:|---:|---:|" + ("---:|---:|---:|" if ref else "")]
    for row in _rows():
        label = _SPLIT.get(row["trace"], row["trace"])
        python = _s(row["python_s"])
        if row["python_instructions"] < row["instructions"]:
            python += f" (first {row['python_instructions']:,} instructions)"
        cells = [f"**{label}**" if row["trace"] in _SPLIT else label, f"{row['commands']:,}",
                 f"{row['cycles']:,}", _s(row["kernel_s"]), python]
        if ref:
            cells += [_s(row["public_s"]), _s(row["ours_s"]),
                      _ratio(row["public_s"] / row["ours_s"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The decode step's programs, as the tables name them.
_PROGRAMS = {"writes": "token writes", "qk": "QK^T", "sv": "SV"}


def _decode_table() -> str:
    """One Llama-3-8B decode step, by program, on the kernel and the Python model."""
    step = _speed()["decode"]
    lines = ["| program | instructions | DRAM commands | cycles | kernel | Python model "
             "| Python / kernel |", "|---|---:|---:|---:|---:|---:|---:|"]
    for row in step["programs"]:
        lines.append(f"| {_PROGRAMS[row['program']]} | {row['instructions']:,} | "
                     f"{row['commands']:,} | {row['cycles']:,} | {_s(row['kernel_s'])} | "
                     f"{_s(row['python_s'])} | {_ratio(row['python_s'] / row['kernel_s'])} |")
    commands = sum(row["commands"] for row in step["programs"])
    lines.append(f"| **the step** | | {commands:,} | | **{_s(step['kernel_s'])}** | "
                 f"{_s(step['python_s'])} | {_ratio(step['python_s'] / step['kernel_s'])} |")
    return "\n".join(lines)


def _cost_table() -> str:
    """Cost reuse over decode steps: every program simulated in full against the cache."""
    cost = _speed()["cost"]
    lines = ["| programs | count | reused | simulated in full | with the cost cache "
             "| full / cached |", "|---|---:|---:|---:|---:|---:|"]
    for row in [*cost["kinds"], {**cost, "kind": "all"}]:
        lines.append(f"| {row['kind']} | {row['programs']} | {row['hits']} | "
                     f"{_s(row['full_s'])} | {_s(row['cached_s'])} | "
                     f"{_ratio(row['full_s'] / row['cached_s'])} |")
    return "\n".join(lines)


#: The front-end table's program labels.
_LABELS = {"writes": "token writes (one-channel `W MEM`s)",
           "qk": "QK^T (WR_GB to 4-channel groups; WR_BIAS, MAC_ABK, RD_MAC on 32 or 8 "
                 "channels)",
           "sv": "SV (WR_GB to 4-channel groups; WR_BIAS, MAC_ABK, RD_MAC on 32)"}


def _frontend_table() -> str:
    """The decode step's programs under both front ends: cycles (quick), kernel times."""
    timed = record("cycle-model-frontend")["frontend"]["programs"]
    times = {row["program"]: row for row in timed}
    lines = ["| program | instructions | commands | shared cycles | per-channel cycles | "
             "shared/per-channel | kernel, shared | kernel, per-channel |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for row in _facts()["step"]:
        timed = times[row["program"]]
        lines.append(f"| {_LABELS[row['program']]} | {row['instructions']:,} | "
                     f"{row['commands']:,} | {row['shared']:,} | {row['per_channel']:,} | "
                     f"{row['shared'] / row['per_channel']:.3g} | {_s(timed['shared_s'])} | "
                     f"{_s(timed['per_channel_s'])} |")
    return "\n".join(lines)


#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {
    "cycle-model.speed": _speed_table,
    "cycle-model.decode": _decode_table,
    "cycle-model.cost": _cost_table,
    "cycle-model.frontend": _frontend_table,
}


def _split_rows() -> list[dict]:
    return _speed()["per-channel"]


def _split_macab() -> dict:
    return next(r for r in _split_rows() if r["trace"].startswith("micro_macab"))


def _cost_kind(kind: str) -> dict:
    return next(r for r in _speed()["cost"]["kinds"] if r["kind"] == kind)


def _step(name: str) -> dict:
    return next(r for r in _facts()["step"] if r["program"] == name)


def _meet(name: str) -> str:
    """Where a decode step's second run of ``name`` meets the first: ``cycle A of B (shift
    S)``."""
    m = next(r for r in _facts()["meet"] if r["program"] == name)
    return f"cycle {m['at']:,} of {m['cycles']:,} (shift {m['shift']})"


def _shortcuts() -> dict:
    return record("cycle-model-shortcuts")


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "cycle-model.timing.rules": lambda: str(len(timing_table("aimsim-0f28a07").rules)),
    "cycle-model.quirk.reported": lambda: "{:,}".format(
        record("cycle-model-reference")["micro_wrgb_gbbk_bggb_16banks"]["bank_state_cycles"]
        ["0"]["active"]),
    "cycle-model.quirk.per_bank": lambda: f"{_facts()['per_bank_flag']['active']:,}",
    "cycle-model.speed.machine": lambda: _machine("cycle-model-speed"),
    "cycle-model.speed.repeat": lambda: str(_speed()["repeat"]),
    "cycle-model.speed.split.cycles": lambda: f"{_split_macab()['cycles'] / 1e6:.1f} M",
    "cycle-model.speed.split.ns_per_cycle": lambda: (
        f"{_split_macab()['kernel_s'] / _split_macab()['cycles'] * 1e9:.0f} ns"),
    "cycle-model.speed.split.python_over_public": lambda: span(
        [r["python_s"] / r["public_s"] for r in _split_rows()], _ratio),
    "cycle-model.speed.split.public_over_ours": lambda: span(
        [r["public_s"] / r["ours_s"] for r in _split_rows()], _ratio),
    "cycle-model.speed.split.public_over_kernel": lambda: span(
        [r["public_s"] / r["kernel_s"] for r in _split_rows()], _ratio),
    "cycle-model.decode.setup": lambda: (
        f"{_speed()['decode']['requests']} requests x {_speed()['decode']['tokens']:,} tokens"),
    "cycle-model.cost.setup": lambda: (
        "{layers} layers, {requests} requests x {tokens:,} tokens, {steps} decode steps"
        .format(**_speed()["cost"])),
    "cycle-model.decode.kernel": lambda: _s(_speed()["decode"]["kernel_s"]),
    **{f"cycle-model.decode.{name}.kernel": (lambda name=name: _s(next(
        r for r in _speed()["decode"]["programs"] if r["program"] == name)["kernel_s"]))
       for name in _PROGRAMS},
    "cycle-model.decode.python": lambda: _s(_speed()["decode"]["python_s"]),
    "cycle-model.decode.ratio": lambda: _ratio(
        _speed()["decode"]["python_s"] / _speed()["decode"]["kernel_s"]),
    "cycle-model.cost.qksv.reused": lambda: (
        f"{_cost_kind('QK^T and SV')['hits']} of {_cost_kind('QK^T and SV')['programs']}"),
    "cycle-model.cost.qksv.ratio": lambda: _ratio(
        _cost_kind("QK^T and SV")["full_s"] / _cost_kind("QK^T and SV")["cached_s"]),
    "cycle-model.cost.step.full": lambda: _s(
        _speed()["cost"]["full_s"] / _speed()["cost"]["steps"]),
    "cycle-model.cost.step.cached": lambda: _s(
        _speed()["cost"]["cached_s"] / _speed()["cost"]["steps"]),
    "cycle-model.cost.step.ratio": lambda: _ratio(
        _speed()["cost"]["full_s"] / _speed()["cost"]["cached_s"]),
    "cycle-model.shortcuts.plain": lambda: (
        f"{_shortcuts()['plain']['commands'] / _shortcuts()['plain']['seconds'] / 1e3:.0f} k"),
    "cycle-model.shortcuts.ratio": lambda: _ratio(
        _shortcuts()["plain"]["seconds"] / _shortcuts()["shortcuts"]["seconds"]),
    "cycle-model.follow.qk": lambda: _meet("qk"),
    "cycle-model.follow.sv": lambda: _meet("sv"),
    "cycle-model.follow.met": lambda: (
        f"{_facts()['follow']['met']} of the {_facts()['follow']['of']}"),
    "cycle-model.frontend.writes.ratio": lambda: (
        f"{_step('writes')['shared'] / _step('writes')['per_channel']:.0f}x"),
    "cycle-model.frontend.writes2048.ratio": lambda: (
        f"{_facts()['writes']['shared'] / _facts()['writes']['per_channel']:.0f}x"),
    "cycle-model.frontend.writes2048.cycles": lambda: (
        f"{_facts()['writes']['per_channel']:,} against {_facts()['writes']['shared']:,}"),
    "cycle-model.frontend.seed188": lambda: (
        f"{_facts()['seed188']['per_channel']:,} cycles against "
        f"{_facts()['seed188']['shared']:,}"),
}
