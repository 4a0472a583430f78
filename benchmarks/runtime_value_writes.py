"""Commit Zone ablation: row activations, cycles and energy of single-token Value writes.

A decode-only batch (every request prefilled with 100-200 tokens, then ``--steps`` decode
steps, commits included) on three write paths: with the Commit Zone (CZ slots, ``W MEM``
grouped by CRS row), without it using ``WR_ABK`` (one scatter write per Value row), and
without it using ``W MEM`` (one masked burst per bank and Value row, as the paper describes)
(:mod:`patton.eval.micro.value_writes`). Every decode step's Value-write program runs on the
cycle model, under each timing profile asked for (default: both, side by side;
``docs/timing-profiles.md``). The programs are the same under every profile; the commands
they issue (FR-FCFS reorders conventional writes by timing, and so row hits) and their cycles
and energy need not be. ``--device-ext aim aim+wr16`` adds the Commit Zone on a device with
the open-row all-bank write (``cz_wr16``: its single-token writes as ``WR_ABK_OPEN``), no
Commit Zone on it (``no_cz_wr16``: the ``WR_ABK`` token writes as ``WR_ABK_OPEN``, a step's
sorted by row) and every path's instructions and ACT / ACT16 commands; the default (``aim``)
output is as before.

    python benchmarks/runtime_value_writes.py [--model llama3-8b] [--requests 32] [--steps 32]
        [--timing aimsim-0f28a07 aimsim-2eb1ee0] [--frontend shared per_channel]
        [--device-ext aim aim+wr16] [--json]
"""

from __future__ import annotations

import argparse
import json

from patton.eval.micro.value_writes import ext_path, measure
from patton.runtime.models import MODELS, model
from patton.runtime.patton.config import Config
from patton.sim.cycle_model import FRONTENDS
from patton.sim.extensions import DEFAULT_EXT, EXTENSIONS
from patton.sim.timing import PROFILES

#: The figures of the table (and their formats); the detailed ones only with an extension.
FIGURES = (("activations", "{:,}"), ("cycles", "{:,}"), ("energy_nj", "{:,.0f}"))
DETAIL = (("instructions", "{:,}"), ("act", "{:,}"), ("act16", "{:,}"))


def table(results: dict[str, dict], exts: tuple[str, ...] = ()) -> list[str]:
    """Markdown rows: one per (figure, variant), one column per profile (ratio over CZ).

    ``exts``: the extension sets besides ``aim`` measured (a ``cz_<feature>`` row each, a
    ``no_cz_<feature>`` row each that has ``wr16``, and the instruction and ACT / ACT16
    figures).
    """
    names = list(results)
    lines = ["| figure | write path | " + " | ".join(names) + " |",
             "|---|---|" + "---:|" * len(names)]
    labels = {"cz": "CZ (`W MEM`)", "no_cz_mem": "no CZ, `W MEM`",
              "no_cz_abk": "no CZ, `WR_ABK`"}
    labels.update({ext_path(e): f"CZ (`WR_ABK_OPEN`, {e})" for e in exts})
    labels.update({ext_path(e, "no_cz"): f"no CZ, `WR_ABK_OPEN` by row ({e})" for e in exts})
    variants = ["cz", *(ext_path(e) for e in exts), "no_cz_mem", "no_cz_abk",
                *(ext_path(e, "no_cz") for e in exts)]
    variants = [v for v in variants if all(v in row for row in results.values())]
    for figure, fmt in FIGURES + (DETAIL if exts else ()):
        for variant in variants:
            cells = []
            for name in names:
                row = results[name]
                cell = fmt.format(row[variant][figure])
                ratio = row.get(f"{variant}_over_cz", {}).get(figure)
                if ratio is not None:
                    cell += f" ({ratio:.2f}x)"
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
    ap.add_argument("--device-ext", nargs="+", choices=EXTENSIONS, default=[DEFAULT_EXT],
                    metavar="SET", help="device extension sets: the three paths run on aim, "
                    "and each other set adds the Commit Zone on it, and with wr16 no Commit "
                    "Zone with WR_ABK_OPEN by row (default: aim only; "
                    + ", ".join(EXTENSIONS) + ")")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    c = Config(model(args.model), layers=1)
    exts = tuple(e for e in dict.fromkeys(args.device_ext) if e != DEFAULT_EXT)
    results = {(timing if args.frontend == ["shared"] else f"{timing}, {frontend}"):
               measure(c, args.requests, args.steps, args.seed, timing, frontend,
                       (DEFAULT_EXT, *exts))
               for timing in args.timing for frontend in args.frontend}
    if args.json:
        print(json.dumps({"model": args.model, "requests": args.requests,
                          "steps": args.steps,
                          **({"device_ext": [DEFAULT_EXT, *exts]} if exts else {}),
                          "timing": results}))
        return
    print(f"{args.model}, 1 layer, {args.requests} requests, {args.steps} decode steps; "
          + ("ratios are over CZ (`W MEM`)" if exts else "ratios are no-CZ over CZ"))
    print("\n".join(table(results, exts)))


if __name__ == "__main__":
    main()
