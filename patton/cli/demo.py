"""``patton demo``: a multi-turn chat served by the PATTON runtime on live RTL channels.

The embedded engine (vLLM 0.33's scheduler) serves the conversations of a conversation file
(default: eight ShareGPT conversations of two or three turns, Llama-3 tokens, messages cut to 16
tokens: ``chat.demo_conversations``) through the PATTON runtime, on one ChPerHead channel group
of Llama-3-8B (one KV head on four AiM channels, two layers) or, with ``--channels 32``, on the
whole device (its 8 KV heads on 32 channels; any multiple of 4 up to 32 serves that many heads):
per scheduler step the KV writes and Commit Zone commits, then QK^T, a softmax on the host and SV
for every decoding request, all on the device, every step checked (:mod:`patton.serving.chat`).
``--device rtl`` (the default) runs every channel as its own Verilator simulation of the
Amaranth RTL, driven by the cycle model's schedule and scored against the functional model;
``--device model`` runs the cycle and functional models only. ``--device-ext aim+wr16`` serves
on a device with the open-row all-bank write (the cycle model's and the RTL's timing table of
that extension set), which the runtime's Commit Zone token writes then use (``WR_ABK_OPEN``).

Prints a row per step (progress on stderr with ``--json``), a summary, and writes
``cycles.png`` (cycles per step by phase) and ``chat.json`` into ``--out`` (default
``build/demo/<device>``: a model run leaves an RTL run's files alone); ``--waves STEP`` writes
an FST waveform of channel 0 up to the end of step STEP.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from patton.cli.options import add_device_ext_option, check_folder, choice, integer, plain
from patton.serving import conversations as cv
from patton.serving.chat import (
    CH_PER_HEAD,
    DEMO_CONVERSATIONS,
    KV_HEADS,
    PHASES,
    Chat,
    ChatReport,
    ChatSetup,
    ChatStep,
)
from patton.serving.chat_plot import plot
from patton.serving.faults import Faults
from patton.sim.extensions import DEFAULT_EXT
from patton.sim.textfile import decimal, shown, write_atomic
from patton.sim.timing import timing_table

__all__ = ["HEADER", "DEFAULT_OUT", "add_parser", "channels", "row", "run", "summary"]

#: ``--out``'s default, under which each ``--device`` has its own folder.
DEFAULT_OUT = Path("build/demo")

NATURAL = integer(0)


def channels(text: str) -> int:
    """Argparse type of ``--channels``: a decimal multiple of 4 from 4 to 32 (a ChPerHead group
    of 4 channels per KV head of Llama-3-8B, which has 8)."""
    rule = f"a multiple of {CH_PER_HEAD} from {CH_PER_HEAD} to {KV_HEADS * CH_PER_HEAD}"
    try:
        value = decimal(text, "value")
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (expected {rule})") from None
    if value % CH_PER_HEAD or not CH_PER_HEAD <= value <= KV_HEADS * CH_PER_HEAD:
        raise argparse.ArgumentTypeError(
            f"must be {rule} ({CH_PER_HEAD} channels per KV head of Llama-3-8B, which has "
            f"{KV_HEADS}), got {text}")
    return value


channels.__name__ = f"multiple of {CH_PER_HEAD} up to {KV_HEADS * CH_PER_HEAD}"

#: The demo table's head (:func:`row` makes its lines).
HEADER = (f"{'step':>4} {'reqs':>4} {'prefill':>7} {'decode':>6} {'hits':>5} {'kv':>4} "
          f"{'commit':>6} {'evict':>5} {'writes':>7} {'commits':>7} {'qk':>7} {'sv':>7} "
          f"{'checks':>6}\n"
          f"{'':>4} {'':>4} {'tokens':>7} {'tokens':>6} {'':>5} {'':>4} {'':>6} {'':>5} "
          f"{'cycles by phase':^31}")


def row(s: dict[str, Any]) -> str:
    """One step's line of the demo's table, from its record (``ChatStep.as_dict``)."""
    verdict = "ok" if not s["failures"] else f"FAIL {len(s['failures'])}"
    c = s["cycles"]
    return (f"{s['step']:>4} {s['requests']:>4} {s['prefill_tokens']:>7} "
            f"{s['decode_tokens']:>6} {s['hit_tokens']:>5} {s['kv_writes']:>4} "
            f"{s['commits']:>6} {s['evictions']:>5} {c['writes']:>7} {c['commits']:>7} "
            f"{c['qk']:>7} {c['sv']:>7} {verdict:>6}")


def add_parser(sub: Any) -> None:
    """Add ``patton demo`` to the ``patton`` command's subparsers."""
    demo = sub.add_parser(
        "demo", help="a multi-turn chat served by PATTON on live RTL channels (or the "
                     "device models), every step checked",
        description=plain(__doc__.split("\n\n")[0]))
    devices = choice(("rtl", "model"))
    demo.add_argument("--device", type=devices, metavar=devices.metavar, default="rtl",
                      help="rtl: a Verilator simulation per channel, checked against the "
                           "models (default); model: the cycle and functional models only")
    demo.add_argument("--channels", type=channels, default=CH_PER_HEAD, metavar="N",
                      help=f"AiM channels: {CH_PER_HEAD} per KV head of Llama-3-8B "
                           f"(default {CH_PER_HEAD}: one head; {KV_HEADS * CH_PER_HEAD}: its "
                           f"{KV_HEADS} heads, the whole device)")
    add_device_ext_option(demo)
    demo.add_argument("--conversations", metavar="FILE.jsonl", default=str(DEMO_CONVERSATIONS),
                      help="conversation file (default: the bundled eight-conversation chat)")
    demo.add_argument("--steps", type=NATURAL, metavar="N",
                      help="stop after N scheduler steps (default: serve every conversation)")
    demo.add_argument("--seed", type=NATURAL, default=0,
                      help="seed of the K/V/query generator (default 0)")
    demo.add_argument("--waves", type=NATURAL, metavar="STEP",
                      help="write an FST waveform of channel 0 from the start to the end of "
                           "step STEP (rtl only; a second Verilator build the first time)")
    demo.add_argument("--fault", type=choice(Faults.KINDS), metavar=choice(Faults.KINDS).metavar,
                      help="inject one fault (at --fault-step) to see the checks catch it")
    demo.add_argument("--fault-step", type=NATURAL, default=12, metavar="STEP",
                      help="step of --fault (default 12)")
    demo.add_argument("--out", metavar="DIR", default=None,
                      help="folder for cycles.png, chat.json and the waveform (default "
                           f"{DEFAULT_OUT}/DEVICE: {DEFAULT_OUT}/rtl or {DEFAULT_OUT}/model)")
    demo.add_argument("--json", action="store_true",
                      help="print the figures as one JSON object (the table goes to stderr)")
    demo.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo; return 0 when every check of every step passed."""
    if args.waves is not None and args.device != "rtl":
        return _error(args, "--waves needs --device rtl")
    if args.fault is not None and args.steps is not None and args.fault_step >= args.steps:
        return _error(args, f"--fault-step {args.fault_step} is past the run's last step "
                            f"({args.steps - 1} with --steps {args.steps}): the fault would "
                            "never be injected")
    try:
        out = check_folder(args.out if args.out is not None else DEFAULT_OUT / args.device,
                           "--out")
    except ValueError as e:
        return _error(args, str(e))
    try:
        conversations = cv.read(args.conversations)
    except cv.WorkloadError as e:
        return _error(args, str(e), e.source, e.line)
    except OSError as e:
        return _error(args, f"{shown(args.conversations)}: {e.strerror or e}")
    setup = ChatSetup.of_channels(args.channels, seed=args.seed)
    table: TextIO = sys.stderr if args.json else sys.stdout
    faults = Faults(args.fault, args.fault_step) if args.fault else None
    started = time.perf_counter()
    ext = args.device_ext
    print(f"PATTON serving {len(conversations)} conversations ({shown(args.conversations)}) on "
          f"{'RTL channels under Verilator' if args.device == 'rtl' else 'the device models'}"
          + ("" if ext == DEFAULT_EXT else f" with the device extension {ext}")
          + f": Llama-3-8B, {setup.geometry}, {setup.layers} layers, "
          f"{setup.num_blocks - 1} engine blocks of {setup.block_size} tokens", file=table)
    if args.device == "rtl":
        try:
            report, ready, memory = _on_rtl(conversations, setup, faults, args, table, out)
        except _Failed as e:
            return _error(args, str(e))
    else:
        from patton.sim.executor import CycleExecutor

        ready, memory = 0.0, {}
        chat = Chat(conversations, CycleExecutor(setup.config().device, timing_table(None, ext)),
                    setup, faults=faults, max_steps=args.steps)
        report = _serve(chat, table)
    wall = time.perf_counter() - started
    figures = report.as_dict()
    figures["wall_seconds"] = round(wall, 3)
    if args.device == "rtl":
        figures["ready_seconds"] = round(ready, 3)  # building or loading the simulators
        figures["memory_mib"] = memory
    if faults is not None and faults.hit is None:  # a check of the checks that did not run
        return _error(args, f"--fault {args.fault} was never injected: the run ended "
                            f"after {len(report.steps)} steps, before --fault-step "
                            f"{args.fault_step}; nothing written")
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "chat.json", json.dumps(figures, indent=1) + "\n")
    png = plot(report, out / "cycles.png")
    if faults is not None:
        figures["fault"] = faults.hit
    _summary(figures, table, out, png)
    if args.json:
        figures.pop("per_step")
        json.dump(figures, sys.stdout)
        sys.stdout.write("\n")
    return 0 if not report.failures else 1


def _on_rtl(conversations: list, setup: ChatSetup, faults: Faults | None,
            args: argparse.Namespace, table: TextIO,
            out: Path) -> tuple[ChatReport, float, dict[str, float]]:
    """Serve on the setup's channels, each a simulator of the RTL; return the report, the
    seconds the simulators took to be ready (built, or loaded from the cache) and the peak
    memory (:func:`_memory`)."""
    from patton.tb.builds import announce, pending_build
    from patton.tb.executor import RtlExecutor
    from patton.tb.toolchain import quiet

    device = setup.config().device
    log = out / "build.log"
    pending = pending_build(setup.rows, ext=args.device_ext)
    t = time.perf_counter()
    try:
        with announce(pending, f"the RTL channel (rows {setup.rows})", log), quiet(log):
            ex = RtlExecutor(device, channels=range(setup.channels), rows=setup.rows,
                             strict=False, name="demo",
                             timing=timing_table(None, args.device_ext))
    except Exception as e:  # noqa: BLE001 - reported with the log, not as a traceback
        raise _Failed(f"the RTL channel could not be built or started ({type(e).__name__}: "
                      f"{e}); the build output is in {log}") from e
    with ex:
        ready = time.perf_counter() - t
        print(f"{setup.channels} channel simulations ready in {ready:.1f} s", file=table,
              flush=True)
        waves = None
        if args.waves is not None:
            from patton.tb.waves import Waves

            with announce(pending_build(setup.rows, "fst"),
                          f"the RTL channel with FST tracing (rows {setup.rows})", log,
                          kind="channel-fst"), quiet(log):
                waves = Waves(args.waves, setup.rows, out)
        chat = Chat(conversations, ex, setup, faults=faults, max_steps=args.steps,
                    observers=[waves] if waves is not None else [])
        try:
            report = _serve(chat, table)
        finally:
            if waves is not None:
                print(waves.close(), file=table)
    return report, ready, _memory(ex)


def _memory(ex: Any) -> dict[str, float]:
    """Peak resident memory in MiB of this process (the engine, the runtime, the models, the
    checks; ``ru_maxrss`` is in KiB on Linux) and of the largest channel simulator, once the
    executor ``ex`` has closed them."""
    import resource

    host = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    peaks = [s.peak_memory_mib for s in ex.sessions.values() if s.peak_memory_mib is not None]
    return {"host": round(host, 1), "simulator": round(max(peaks, default=0.0), 1)}


class _Failed(Exception):
    """The RTL could not be run (the message says why and where the log is)."""


def _serve(chat: Chat, table: TextIO) -> ChatReport:
    print(HEADER, file=table)

    def show(s: ChatStep) -> None:
        print(row(s.as_dict()), file=table, flush=True)
        for f in s.failures[:5]:
            print(f"     {f}", file=table)

    return chat.run(show)


def _summary(f: dict[str, Any], table: TextIO, out: Path, png: Path | None) -> None:
    *lines, verdict = summary(f)
    print(file=table)
    for line in lines:
        print(line, file=table)
    print(f"files        {out / 'chat.json'}" + (f", {png}" if png else ""), file=table)
    print(verdict, file=table)


def summary(f: dict[str, Any]) -> list[str]:
    """The demo's closing lines (files aside), from its figures (``patton demo --json``)."""
    by = f["cycles_by_phase"]
    served = "every conversation served" if f["complete"] else "stopped early"
    lines = [
        f"steps        {f['steps']} ({served}), {f['requests']} requests, "
        f"{f['finished']} finished",
        f"tokens       {f['prefill_tokens']} prefill, {f['decode_tokens']} decode, "
        f"{f['hit_tokens']} prefix-cache hits; {f['kv_writes']} KV writes, "
        f"{f['commits']} commits, {f['evictions']} evictions, {f['preempted']} preemptions",
        f"cycles       {f['cycles']:,} (" + ", ".join(f"{p} {by[p]:,}" for p in PHASES)
        + f") = {f['cycles'] * 0.5 / 1000:.1f} us of DRAM time",
        f"checks       {f['placement_checked']:,} KV elements read back, "
        f"{f['placement_mismatches']} misplaced; {f['mismatches']} attention/read "
        f"mismatches; {f['violations']} timing violations; worst error "
        f"{f['max_tolerance_ratio']:.2f} x the float64 tolerance"]
    if f["device"] == "rtl":
        lines.append(
            f"RTL          {f['channel_cycles']:,} cycles simulated by "
            f"{f.get('channels', CH_PER_HEAD)} channel simulators "
            f"in {f['rtl_seconds']:.1f} s of waiting = {f['channel_cycles_per_second']:,} "
            f"channel cycles/s ({f['rtl_cycles_per_second']:,} device cycles/s); "
            f"{f['mat_words']:,} mat words equal the functional model's at the end")
    failures = len(f["failures"])
    lines.append(f"verdict      {'PASS' if not failures else 'FAIL'} ({failures} failure(s)) "
                 f"in {f['wall_seconds']:.1f} s")
    return lines


def _error(args: argparse.Namespace, message: str, file: str | None = None,
           line: int | None = None) -> int:
    print(f"error: {message}", file=sys.stderr)
    if args.json:
        json.dump({"error": message, "file": file, "line": line}, sys.stdout)
        sys.stdout.write("\n")
    return 2
