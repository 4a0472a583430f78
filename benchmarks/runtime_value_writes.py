"""Commit Zone ablation: row activations, cycles and energy of single-token Value writes.

A decode-only scenario (every request prefilled with 100-200 tokens, then ``--steps``
decode steps, commits included) is generated once and replayed with the Commit Zone (CZ
slots, ``W MEM`` grouped by CRS row), without it using ``WR_ABK`` (one scatter write per
Value row), and without it using ``W MEM`` (one masked burst per bank and Value row, as the
paper describes). Every decode step's Value-write program runs on the cycle model, under each
timing profile asked for (default: both, side by side; ``docs/timing-profiles.md``). The
programs are the same under every profile; the commands they issue (FR-FCFS reorders
conventional writes by timing, and so row hits) and their cycles and energy need not be.

    python benchmarks/runtime_value_writes.py [--model llama3-8b] [--requests 32] [--steps 32]
        [--timing aimsim-0f28a07 aimsim-2eb1ee0] [--frontend shared per_channel] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

from patton.runtime.models import MODELS, model
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS
from patton.sim.cycle_model import FRONTENDS
from patton.serving.loop import execute
from patton.serving.scenario import generate
from patton.sim.timing import PROFILES

#: The three write paths: (name, runtime variant).
PATHS = (("cz", VARIANTS["patton"]), ("no_cz_abk", VARIANTS["patton-wo-cz"]),
         ("no_cz_mem", dataclasses.replace(VARIANTS["patton-wo-cz"], token_op="mem")))
#: What is compared against the Commit Zone.
RATIOS = ("activations", "cycles", "energy_nj")


def measure(c: Config, log: list, seed: int, timing: str, frontend: str = "shared") -> dict:
    """Return, per write path, the Value-write figures under ``timing`` and ``frontend``, plus
    ratios over CZ."""
    out: dict = {}
    for name, variant in PATHS:
        start = time.perf_counter()
        _, r = execute(c, log, variant, seed=seed, functional=False, cycles=True,
                       timing=timing, frontend=frontend)
        out[name] = {"activations": r.value_write_activations, "cycles": r.value_write_cycles,
                     "commands": r.value_write_commands, "energy_nj": r.value_write_energy_nj,
                     "writes": r.value_writes, "commits": r.commits,
                     "seconds": round(time.perf_counter() - start, 1)}
    cz = out["cz"]
    for name in ("no_cz_abk", "no_cz_mem"):
        out[f"{name}_over_cz"] = {k: out[name][k] / cz[k] for k in RATIOS}
    return out


def table(results: dict[str, dict]) -> list[str]:
    """Markdown rows: one per (figure, variant), one column per profile (ratio over CZ)."""
    names = list(results)
    lines = ["| figure | write path | " + " | ".join(names) + " |",
             "|---|---|" + "---:|" * len(names)]
    labels = {"cz": "CZ (`W MEM`)", "no_cz_mem": "no CZ, `W MEM`",
              "no_cz_abk": "no CZ, `WR_ABK`"}
    for figure, fmt in (("activations", "{:,}"), ("cycles", "{:,}"),
                        ("energy_nj", "{:,.0f}")):
        for variant in ("cz", "no_cz_mem", "no_cz_abk"):
            cells = []
            for name in names:
                row = results[name]
                cell = fmt.format(row[variant][figure])
                if variant != "cz":
                    cell += f" ({row[f'{variant}_over_cz'][figure]:.2f}x)"
                cells.append(cell)
            lines.append(f"| {figure} | {labels[variant]} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama3-8b", choices=sorted(MODELS))
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timing", nargs="+", choices=PROFILES, default=list(PROFILES),
                    metavar="PROFILE", help="timing profiles to run (default: all, "
                                            + ", ".join(PROFILES) + ")")
    ap.add_argument("--frontend", nargs="+", choices=FRONTENDS, default=["shared"],
                    help="cycle-model front ends to run (default: shared, the public "
                         "simulator's; per_channel decodes one instruction per cycle per "
                         "channel)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    c = Config(model(args.model), layers=1)
    log = generate(c, requests=args.requests, steps=args.steps, seed=args.seed,
                   prompt=(100, 200), decode=(10**6, 10**6 + 1), attend_every=10**9)
    results = {(timing if args.frontend == ["shared"] else f"{timing}, {frontend}"):
               measure(c, log, args.seed, timing, frontend)
               for timing in args.timing for frontend in args.frontend}
    if args.json:
        print(json.dumps({"model": args.model, "requests": args.requests,
                          "steps": args.steps, "timing": results}))
        return
    print(f"{args.model}, 1 layer, {args.requests} requests, {args.steps} decode steps; "
          "ratios are no-CZ over CZ")
    print("\n".join(table(results)))


if __name__ == "__main__":
    main()
