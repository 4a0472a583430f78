"""How fast each long-running ``patton`` command stops on ^C and on SIGTERM.

Starts each command in a process group of its own, waits until it is at work (a line it prints,
or three seconds), sends SIGINT to the group (a terminal's ^C) or SIGTERM to the process (a
supervisor), and prints the exit status, the seconds from the signal to the exit and the
``interrupted:`` line. ``tests/test_interrupts.py`` checks the same cases (and that nothing is
left behind); this script gives the figures of ``docs/reliability.md``.

    python benchmarks/interrupt_latency.py [--only NAME ...]

The RTL cases need Verilator's build of the channel (made on first use, minutes); ``hw prove``
needs SymbiYosys (``docs/verification.md``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"
CENT = DATA / "aim" / "cent" / "cent_llama70b_gqa_mp_4dev_seq64.trace"
CONVERSATIONS = DATA / "serving" / "sharegpt-llama3-300.jsonl"

#: name -> (argv after ``patton``, a line it prints once at work or None)
CASES: dict[str, tuple[list[str], str | None]] = {
    "runtime scenario": (["runtime", "scenario", "--steps", "2048", "--no-progress",
                          "--trace", "out.trace"], None),
    "cost": (["cost", "--steps", "5000", "--json"], None),
    "serve": (["serve", "--conversations", "many.jsonl", "--runtime", "patton",
               "--no-progress"], None),
    "aim run": (["aim", "run", str(CENT), "--schedule", "out.schedule"], None),
    "aim check": (["aim", "check", "cent.schedule"], None),
    "rtl run": (["rtl", "run", str(CENT), "--jobs", "2"], "replaying"),
    "rtl check": (["rtl", "check", "cent.schedule", "--jobs", "2"], "replaying"),
    "demo": (["demo", "--out", "demo"], "channel simulations ready"),
    "hw prove": (["hw", "prove", "--out", "proofs"], None),
}


def inputs(folder: Path) -> None:
    """Ten copies of the 300 conversations (ids of their own); the CENT trace's schedule."""
    with open(folder / "many.jsonl", "w") as f:
        for copy in range(10):
            for line in CONVERSATIONS.read_text().splitlines():
                conversation = json.loads(line)
                conversation["id"] = f"{conversation['id']}-{copy}"
                f.write(json.dumps(conversation) + "\n")
    subprocess.run([sys.executable, "-m", "patton.cli", "aim", "run", str(CENT), "--schedule",
                    str(folder / "cent.schedule")], check=True, capture_output=True)


def stop(folder: Path, argv: list[str], ready: str | None, sig: signal.Signals, *,
         started: Callable[[int], None] | None = None,
         signalled: Callable[[], None] | None = None) -> tuple[int, float, list[str]]:
    """Run ``patton ARGV`` in ``folder`` (its output in ``stdout.txt``, ``stderr.txt``,
    unbuffered) and interrupt it; return (exit status, seconds to exit, the ``interrupted:``
    lines). ``started(pid)`` is told the process (and group) id; ``signalled()`` is called
    right after the signal is sent."""
    out, err = folder / "stdout.txt", folder / "stderr.txt"
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "patton.cli", *argv], stdout=o, stderr=e,
                                start_new_session=True, cwd=folder,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    if started is not None:
        started(proc.pid)
    if ready is None:
        time.sleep(3.0)
    else:
        while ready not in out.read_text(errors="replace") + err.read_text(errors="replace"):
            if proc.poll() is not None:
                raise RuntimeError(f"patton {' '.join(argv)} ended before the signal:\n"
                                   f"{err.read_text()}")
            time.sleep(0.2)
        time.sleep(2.0)
    if proc.poll() is not None:
        raise RuntimeError(f"patton {' '.join(argv)} ended before the signal")
    begun = time.monotonic()
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    if signalled is not None:
        signalled()
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise RuntimeError(f"patton {' '.join(argv)} did not stop within 120 s") from None
    seconds = time.monotonic() - begun
    said = [x for x in err.read_text().splitlines() if x.startswith("interrupted:")]
    return code, seconds, said


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", choices=sorted(CASES), help="these commands only")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object (command -> signal -> exit, seconds, report) "
                    "instead of the table")
    args = ap.parse_args()
    results: dict[str, dict[str, dict]] = {}
    # The commands start with ^C's default action even when this script was started with
    # SIGINT ignored (a background job of a shell without job control): they inherit that.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with tempfile.TemporaryDirectory(prefix="patton-interrupts-") as tmp:
        folder = Path(tmp)
        print("making the inputs (the CENT trace's schedule, 1.2 M commands)", file=sys.stderr)
        inputs(folder)
        if not args.json:
            print(f"{'command':17} {'signal':8} {'exit':>4} {'seconds':>7}  report")
        for name, (argv, ready) in CASES.items():
            if args.only and name not in args.only:
                continue
            for sig in (signal.SIGINT, signal.SIGTERM):
                code, seconds, said = stop(folder, argv, ready, sig)
                results.setdefault(name, {})[sig.name] = {"exit": code, "seconds": seconds,
                                                          "report": list(said)}
                if not args.json:
                    print(f"{name:17} {sig.name:8} {code:>4} {seconds:>7.2f}  "
                          f"{' / '.join(said) or '(none)'}", flush=True)
    if args.json:
        print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
