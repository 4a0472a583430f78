"""``docs/run-cost.md``'s measured numbers: ``patton cost`` on Llama-3-8B with PATTON over
300 and 1,000 steps and until its conversations end (figures and wall times)."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Quick, Timed, record, span


def _cost(steps: int) -> Timed:
    """``patton cost --json`` on Llama-3-8B with PATTON for ``steps`` steps."""
    return Timed(["-m", "patton.cli", "cost", "--model", "llama3-8b", "--runtime", "patton",
                  "--steps", str(steps), "--json"])


#: Timed record name -> how it is made (its figures are deterministic, its times are not).
TIMED: dict[str, Timed] = {
    "run-cost-300": _cost(300),
    "run-cost-1000": _cost(1000),
    "run-cost-12000": _cost(12000),
}

_PARTS = ("k_write", "v_write", "qk", "sv")


def _transcript() -> str:
    """What ``patton cost --steps 300`` prints, its wall-time line aside."""
    rc = record("run-cost-300")
    lines = [f"{rc['model']} {rc['runtime']} ({rc['frontend']} front end): {rc['steps']} steps, "
             f"{rc['decode_tokens']} decode tokens, {rc['prefill_tokens']} prefill tokens "
             f"({rc['recomputed_tokens']} recomputed), {rc['preemptions']} preemptions, "
             f"hit rate {rc['hit_rate']:.4f}"]
    for name in _PARTS:
        part = rc["parts"][name]
        lines.append(f"  {name:8s} {part['cycles']:>14d} cycles  {part['seconds'] * 1e3:10.3f} "
                     f"ms  {part['joules'] * 1e3:10.3f} mJ")
    lines.append(f"  PIM      {rc['pim_seconds'] * 1e3:10.3f} ms  {rc['pim_joules'] * 1e3:10.3f} "
                 f"mJ; GPU recompute {rc['recompute_seconds'] * 1e3:.3f} ms  "
                 f"{rc['recompute_joules'] * 1e3:.3f} mJ")
    lines.append(f"  total    {rc['latency_seconds'] * 1e3:10.3f} ms  "
                 f"{rc['energy_joules'] * 1e3:10.3f} mJ")
    return "```\n" + "\n".join(lines) + "\n```"


def _per_step(name: str) -> str:
    """The run's measuring wall time per step."""
    rc = record(name)
    return f"{rc['wall_seconds'] / rc['steps'] * 1e3:.1f} ms"


def _share(name: str, phase: str) -> str:
    """One phase's share of the run's measuring wall time."""
    rc = record(name)
    return f"{100 * rc['seconds_by_phase'][phase] / rc['wall_seconds']:.0f} %"


def _phase(name: str, phase: str, digits: int = 2) -> str:
    """One phase's wall time in the run."""
    return f"{record(name)['seconds_by_phase'][phase]:.{digits}f} s"


#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {"run-cost.transcript": _transcript}

#: Number name -> how it is made.
NUMBERS: dict[str, Callable[[], str]] = {
    "run-cost.300.measure": lambda: f"{record('run-cost-300')['wall_seconds']:.2f} s",
    "run-cost.300.per_step": lambda: _per_step("run-cost-300"),
    **{f"run-cost.300.share.{p}": (lambda p=p: _share("run-cost-300", p))
       for p in ("cycle_model", "programs", "engine")},
    "run-cost.1000.measure": lambda: f"{record('run-cost-1000')['wall_seconds']:.1f} s",
    "run-cost.1000.per_step": lambda: _per_step("run-cost-1000"),
    "run-cost.1000.decode": lambda: f"{record('run-cost-1000')['decode_tokens']:,}",
    "run-cost.1000.prefill": lambda: f"{record('run-cost-1000')['prefill_tokens']:,}",
    "run-cost.1000.hit_rate": lambda: f"{record('run-cost-1000')['hit_rate']:.3f}",
    "run-cost.1000.pim": lambda: (f"{record('run-cost-1000')['pim_seconds']:.3f} s and "
                                  f"{record('run-cost-1000')['pim_joules']:.1f} J"),
    "run-cost.1000.cycle_model": lambda: _phase("run-cost-1000", "cycle_model"),
    "run-cost.1000.programs": lambda: _phase("run-cost-1000", "programs"),
    "run-cost.all.steps": lambda: f"{record('run-cost-12000')['steps']:,}",
    "run-cost.all.measure": lambda: f"{record('run-cost-12000')['wall_seconds']:.1f} s",
    "run-cost.all.per_step": lambda: _per_step("run-cost-12000"),
    "run-cost.all.cycle_model": lambda: _phase("run-cost-12000", "cycle_model", 1),
    "run-cost.all.programs": lambda: _phase("run-cost-12000", "programs", 1),
    "run-cost.all.engine": lambda: _phase("run-cost-12000", "engine", 1),
}


#: The first-100-steps table's runs: model, runtime, front end (the MHA models at 8 clients
#: over a pool of 16, as the paper's §5.1; the GQA ones at 32 over 64).
_FIRST_100 = (("llama3-8b", "patton", "shared"), ("llama3-8b", "patton-wo-cz", "shared"),
              ("llama3-8b", "patton-no-o2v", "shared"), ("llama3-8b", "patton", "per_channel"),
              ("llama3-8b", "patton-wo-cz", "per_channel"), ("qwen3-8b", "patton", "shared"),
              ("opt-6.7b", "patton", "shared"), ("opt-6.7b", "patton-wo-cz", "shared"),
              ("opt-6.7b", "patton", "per_channel"), ("opt-6.7b", "patton-wo-cz", "per_channel"))


def _first_100_name(model: str, runtime: str, frontend: str) -> str:
    """The quick record of one first-100-steps run."""
    return f"run-cost-100-{model}-{runtime}-{frontend}"


#: ``patton cost ARGS`` with its per-phase wall times (``seconds_by_phase``) left out, so that
#: the record is a function of the inputs.
_COST_WITHOUT_TIMES = ("import json, subprocess, sys; out = json.loads(subprocess.run("
                       "[sys.executable, '-m', 'patton.cli', 'cost', *sys.argv[1:]], "
                       "capture_output=True, text=True, check=True).stdout); "
                       "out.pop('seconds_by_phase'); print(json.dumps(out))")


def _first_100_argv(model: str, runtime: str, frontend: str) -> list[str]:
    """``patton cost --json`` for 100 steps of one run of the table."""
    mha = model.startswith("opt")
    return ["-c", _COST_WITHOUT_TIMES, "--model", model, "--runtime", runtime, "--steps", "100",
            "--frontend", frontend.replace("_", "-"), "--clients", "8" if mha else "32", "--pool",
            "16" if mha else "64", "--json"]


#: Quick record name -> the command whose JSON output it is (wall times left out).
RECORDS: dict[str, Quick] = {_first_100_name(*run): Quick(_first_100_argv(*run))
                             for run in _FIRST_100}


def _first_100_table() -> str:
    """Cycles per part, PIM time and energy of each first-100-steps run."""
    lines = ["| model | runtime | front end | k_write | v_write | qk | sv | PIM ms | PIM J |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run in _FIRST_100:
        rc = record(_first_100_name(*run))
        cycles = [f"{rc['parts'][p]['cycles'] / 1e6:.1f} M" for p in _PARTS]
        lines.append("| " + " | ".join([*run, *cycles, f"{rc['pim_seconds'] * 1e3:.1f}",
                                        f"{rc['pim_joules']:.2f}"]) + " |")
    return "\n".join(lines)


BLOCKS["run-cost.first_100"] = _first_100_table


def _first_100(model: str, runtime: str, frontend: str) -> dict:
    """One first-100-steps run's record."""
    return record(_first_100_name(model, runtime, frontend))


def _v_write_gain() -> str:
    """How many times fewer Value-write cycles PATTON has than PATTON-wo-CZ per channel."""
    gains = [_first_100(m, "patton-wo-cz", "per_channel")["parts"]["v_write"]["cycles"]
             / _first_100(m, "patton", "per_channel")["parts"]["v_write"]["cycles"]
             for m in ("llama3-8b", "opt-6.7b")]
    return span(gains, lambda v: f"{v:.1f}×")


def _above(frontend: str) -> str:
    """How far PATTON's PIM time is above PATTON-wo-CZ's over the two models: ``2-17 %``."""
    above = [100 * (_first_100(m, "patton", frontend)["pim_seconds"]
                    / _first_100(m, "patton-wo-cz", frontend)["pim_seconds"] - 1)
             for m in ("llama3-8b", "opt-6.7b")]
    return span(above, lambda v: f"{v:.0f} %")


NUMBERS.update({
    "run-cost.first_100.v_write_gain": _v_write_gain,
    "run-cost.first_100.above.per_channel": lambda: _above("per_channel"),
    "run-cost.first_100.above.shared": lambda: _above("shared"),
})
