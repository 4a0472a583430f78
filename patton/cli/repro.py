"""``patton repro``: run the paper's evaluation and put it next to the paper's numbers.

``patton repro fig7|fig8|fig9|micro|sensitivity|all [--quick] [--out DIR] [--workers N]
[--json] [--ray ADDRESS] [--steps N] [--models M,M] [--assume AXIS=VALUE ...]
[--frontend shared|per-channel] [--device-ext SET] [--what-if AXIS] [--check|--no-check]
[--progress|--no-progress] [--resume]``
    Run the figure's configurations (each an independent task: local worker processes, or Ray
    remote tasks with ``--ray``), then write ``repro.json`` (the figure records), ``repro.md``
    (tables side by side with the paper) and the PNG plots into ``--out`` (default
    ``repro-out/``). ``--json`` prints the records as one object keyed by figure and nothing
    else on stdout. ``--quick``: 100 steps and two models, every program verified (the
    pipeline check); the default is the paper's scale (> 10,000 steps per configuration, the
    four models). ``--steps`` overrides the serving runs' steps, ``--check``/``--no-check``
    whether Fig. 7/8's programs are verified. ``--assume AXIS=VALUE`` changes one of the
    evaluation's assumptions from the paper configuration (:mod:`patton.eval.assumptions`;
    ``--frontend F`` is ``--assume frontend=F``, ``--device-ext SET`` is ``--assume
    device-ext=SET``: the whole evaluation on that device). ``--what-if device-ext`` adds the
    opt-in axis's other values, on both front ends, to the sensitivity's rows
    (``docs/extensions.md``). Every finished task is kept in ``DIR/tasks/``
    (:mod:`patton.eval.store`); ``--resume`` takes from there the ones that check (the same code,
    the same task, content as written, checks passed) and runs the others again, saying why.

Bad options, an unwritable ``--out`` and an ``--out`` another run is using are reported as
``error: ...`` on stderr with exit status 2 before anything runs; a task that fails, or whose
checks fail, ends the run with exit status 1 and its name (``docs/evaluation.md``).
:func:`add_parser` registers the verb on the ``patton`` sub-parsers.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from patton.cli import interrupt
from patton.cli.options import assumption, check_folder, choice, commands, integer, spelled
from patton.eval.assumptions import AXES, PAPER, parse
from patton.eval.figures import FIGURES, NAMES
from patton.eval.paper import MODELS as MODEL_NAMES
from patton.eval.plan import FULL, QUICK
from patton.eval.report import reduced, scale_note
from patton.eval.repro import DEFAULT_WORKERS, reproduce, write
from patton.eval.store import Store, StoreBusy
from patton.sim.cycle_model import FRONTENDS
from patton.sim.extensions import DEFAULT_EXT, EXTENSIONS

__all__ = ["DEFAULT_OUT", "add_parser", "repro"]

#: Where the files go by default (relative to the working directory).
DEFAULT_OUT = "repro-out"

class UsageError(ValueError):
    """Inconsistent options (reported with exit status 2)."""


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register ``repro`` on the ``patton`` sub-parsers and return its parser."""
    p = subparsers.add_parser("repro", help="reproduce the paper's Fig. 7, 8, 9 and "
                                            "microbenchmarks",
                              description="Run the paper's evaluation and write JSON, "
                                          "markdown and PNGs side by side with the paper.")
    figure = choice((*NAMES, "all"))
    p.add_argument("figure", type=figure, metavar=figure.metavar,
                   help="which figure to reproduce (all: every one)")
    p.add_argument("--quick", action="store_true",
                   help="100 steps, Llama-3-8B and OPT-6.7B, every configuration checked by a "
                        "replayed side run (the pipeline check; default: the paper's scale)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                   help=f"folder for repro.json, repro.md and the PNGs (default "
                        f"{DEFAULT_OUT}/)")
    p.add_argument("--workers", type=integer(1, 256), default=DEFAULT_WORKERS, metavar="N",
                   help=f"local worker processes (default {DEFAULT_WORKERS}; 1 runs the tasks "
                        f"in this process)")
    p.add_argument("--ray", metavar="ADDRESS",
                   help="send the tasks to the Ray cluster at ADDRESS ('local': start one "
                        "here; needs the ray extra)")
    p.add_argument("--steps", type=integer(1), default=None, metavar="N",
                   help="scheduler steps of every Fig. 7/8 cost run (default: 12,000; "
                        "--quick: 100); Fig. 9 runs keep theirs (12,000; --quick: 2,000)")
    p.add_argument("--models", default=None, metavar="M,M",
                   help=f"the models of Fig. 7 and 8 (default: the paper's four; known: "
                        f"{', '.join(MODEL_NAMES)})")
    p.add_argument("--assume", action="append", default=[], metavar="AXIS=VALUE",
                   type=assumption({a.name: a.values for a in AXES.values()}),
                   help="change one assumption from the paper configuration (repeatable); "
                        + "; ".join(f"{spelled(a.name)}: "
                                    f"{'|'.join(spelled(v) for v in a.values)} "
                                    f"(paper {spelled(a.paper)})" for a in AXES.values()))
    frontend = choice(FRONTENDS)
    p.add_argument("--frontend", type=frontend, metavar=frontend.metavar, default=None,
                   help="the cycle-model front end of the headline runs (--assume "
                        "frontend=...; default shared: the public simulator's one decoder; "
                        "Fig. 8 always runs both)")
    p.add_argument("--device-ext", type=choice(EXTENSIONS), default=None, metavar="SET",
                   help="the device extension set of every run (--assume device-ext=...; "
                        f"default {DEFAULT_EXT}: AiM as the public simulator has it)")
    p.add_argument("--what-if", action="append", default=[], metavar="AXIS",
                   type=choice(a.name for a in AXES.values() if a.opt_in),
                   help="also vary this opt-in axis in the sensitivity (on both front ends): "
                        + ", ".join(spelled(a.name) for a in AXES.values() if a.opt_in))
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                   help="verify every program of the Fig. 7/8 runs (the cost run's check; "
                        "default: with --quick only)")
    p.add_argument("--resume", action="store_true",
                   help="take the results of tasks an earlier run of the same code left in "
                        "DIR/tasks/ instead of running them again (every finished task is "
                        "kept there)")
    p.add_argument("--json", action="store_true",
                   help="print the figure records as one JSON object keyed by figure")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar per task on stderr (--no-progress: nothing; "
                        "default: bars on a terminal, else a line every 30 s)")
    p.set_defaults(func=repro)
    return p


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def check_out(out: Path) -> None:
    """Raise UsageError unless ``out`` is (or can be made) a folder we can write into."""
    try:
        check_folder(out, "--out")
    except ValueError as e:
        raise UsageError(str(e)) from None


def figures_of(figure: str) -> tuple[str, ...]:
    """The figures ``figure`` stands for (``all``: every one)."""
    return NAMES if figure == "all" else (figure,)


def repro(args: argparse.Namespace) -> int:
    """``patton repro``: run, write the files, print the records (``--json``) or a summary."""
    from patton.eval.runner import RayUnavailable
    from patton.eval.tasks import TaskError

    out = Path(args.out)
    try:
        if args.ray is not None and not args.ray.strip():
            raise UsageError("--ray needs an address (or 'local')")
        if args.ray is not None and importlib.util.find_spec("ray") is None:
            raise UsageError("--ray needs the ray package: pip install "
                             "'patton-testbench[ray]' (or pip install ray)")
        figures = figures_of(args.figure)
        models: tuple[str, ...] = ()
        if args.models is not None:
            models = tuple(m.strip() for m in args.models.split(","))
            bad = [m for m in models if m not in MODEL_NAMES]
            if bad or not models:
                raise UsageError(f"--models: unknown model(s) {', '.join(bad) or '(none)'}; "
                                 f"known: {', '.join(MODEL_NAMES)}")
        assumed = list(args.assume)
        if args.frontend is not None:
            if any(a.startswith("frontend=") for a in assumed):
                raise UsageError("--frontend and --assume frontend=... both given")
            assumed.append(f"frontend={args.frontend}")
        if args.device_ext is not None:
            if any(a.startswith("device_ext=") for a in assumed):
                raise UsageError("--device-ext and --assume device-ext=... both given")
            assumed.append(f"device_ext={args.device_ext}")
        if len(set(args.what_if)) != len(args.what_if):
            raise UsageError("--what-if names an axis twice")
        try:
            assumptions = parse(assumed)
        except ValueError as e:
            raise UsageError(str(e)) from None
        check_out(out)
    except UsageError as e:
        return _error(str(e))
    scale = QUICK if args.quick else FULL
    if args.steps is not None:
        scale = scale.with_(steps=args.steps)
    if args.models is not None:
        scale = scale.with_(models=models, fig8_models=models)
    if args.check is not None:
        scale = scale.with_(check=args.check)
    scale = scale.with_(assumptions=assumptions, what_if=tuple(args.what_if))
    store = Store(out / "tasks")
    interrupt.keep(lambda: f"kept {_results(len(list(store.folder.glob('*.json'))))} in "
                           f"{store.folder}; run the same command with --resume to continue")
    start = time.perf_counter()
    try:
        records = reproduce(figures, scale, workers=args.workers, ray=args.ray,
                            progress=args.progress,
                            store=store, resume=args.resume)
    except (RayUnavailable, StoreBusy) as e:
        return _error(str(e))
    except TaskError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    seconds = time.perf_counter() - start
    command = "patton repro " + " ".join(_argv(args))
    files = write(records, out, command=command, wall_seconds=seconds, quick=args.quick,
                  scale=scale)
    if args.json:
        json.dump(records, sys.stdout)
        sys.stdout.write("\n")
        return 0
    note = scale_note(figures, scale)
    run = "quick run" if args.quick else "reduced run"
    at = run if note is not None else "the paper's scale"
    print(f"repro       {', '.join(figures)} in {seconds:.1f} s ({at})")
    changed = assumptions.differs(PAPER)
    print("assumptions " + ("the paper configuration" if not changed else ", ".join(
        f"{spelled(a)}={spelled(getattr(assumptions, a))}" for a in changed)
        + " (else the paper configuration)"))
    for f in figures:
        mark = f"{run}: " if reduced(f, scale) else ""
        print(f"{f:<11} {mark}{FIGURES[f].summary(records[f])}")
    if note is not None:
        flags = [o for o, given in (("--quick", args.quick), ("--steps", args.steps),
                                    ("--models", args.models)) if given]
        print(f"note        {run}: {'a pipeline check, ' if args.quick else ''}not the "
              f"paper's scale: {note}; run without {' and '.join(flags) or 'them'} for the "
              "paper's numbers")
    print("wrote       " + ", ".join(os.fspath(p) for p in files))
    return 0


def _results(n: int) -> str:
    return f"{n} task result{'' if n == 1 else 's'}"


def _argv(args: argparse.Namespace) -> list[str]:
    out = [args.figure]
    if args.quick:
        out.append("--quick")
    if args.steps is not None:
        out += ["--steps", str(args.steps)]
    if args.models is not None:
        out += ["--models", args.models]
    if args.check is not None:
        out.append("--check" if args.check else "--no-check")
    for a in args.assume:  # as the command line spells them
        out += ["--assume", "=".join(spelled(part) for part in a.split("=", 1))]
    if args.frontend is not None:
        out += ["--frontend", spelled(args.frontend)]
    if args.device_ext is not None:
        out += ["--device-ext", args.device_ext]
    for a in args.what_if:
        out += ["--what-if", spelled(a)]
    if args.workers != DEFAULT_WORKERS:
        out += ["--workers", str(args.workers)]
    if args.ray is not None:
        out += ["--ray", args.ray]
    if args.resume:
        out.append("--resume")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``repro`` alone (``python -m patton.cli.repro repro ...``)."""
    top = argparse.ArgumentParser(prog="patton", description="The paper's evaluation.")
    add_parser(commands(top, "part"))
    args = top.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
