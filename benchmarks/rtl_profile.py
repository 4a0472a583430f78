"""Where the RTL simulator's time goes: ``perf`` on the throughput benchmark's replay.

Usage: python benchmarks/rtl_profile.py [--instructions N] [--json]

Replays the MAC_ABK schedule of ``benchmarks/rtl_throughput.py`` (N instructions of 64 columns,
nearly all MAC16) on one channel under ``perf record`` (Linux perf, 2,000 samples per second;
it must be installed) and splits the simulator's samples by what runs them:

* ``every cycle``: the logic of the channel's clock (decoder, timing checker, stage-1 write
  multiplexers, mats, registers), which Verilator evaluates on every rising edge;
* ``gated clocks``: the logic behind the gated clocks (``docs/hw.md`` decision 14), evaluated
  only after a MAC, MAC16 or AF16 (the 16 MAC units, their operand and readout logic), a
  WRMAC16 or an EWMUL16: here nearly all MAC16;
* ``stream reader``: ``tb/player_dpi.cpp`` reading and converting schedule lines;
* ``runtime``: Verilator's scheduler and library, the C library, the kernel.

Verilator's functions are attributed by the triggers that call them in the model's
``_eval_nba`` (the generated C++ of the build): the clock's trigger, or a gated clock's. It
prints the shares and the functions that hold the most samples.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from patton.hw.params import ChannelParams
from patton.tb.driver import DRAIN, Driver
from patton.tb.player import SchedulePlayer

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("rtl_throughput", _HERE / "rtl_throughput.py")
assert _spec is not None and _spec.loader is not None
rtl_throughput = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rtl_throughput)

#: The parts, in the order they are printed.
PARTS = ("every cycle", "gated clocks", "stream reader", "runtime")
#: Symbols of the stream reader (tb/player_dpi.cpp and the libc calls it makes).
_READER = re.compile(r"patton_stream|hex_field|hex_digit|getdelim|getline")
_SAMPLE = re.compile(r"^\s*([\d.]+)%\s+\[\.\]\s+(.+?)\s*$")
_CALL = re.compile(r"(Vtop\w*?___nba_\w+)\(")  # the root's functions and a module's (patton_mac)
_TRIGGER = re.compile(r"if \(\(([0-9a-fx]+)ULL & vlSelfRef\.__VnbaTriggered\[0U\]\)\)")


def triggers(build: Path) -> dict[str, set[int]]:
    """Return each nba function of the model in ``build`` with the trigger bits calling it
    (the clock's bit: :func:`clock_trigger`)."""
    text = "".join(path.read_text(errors="replace")
                   for path in sorted(build.glob("Vtop___024root__*.cpp")))
    start = text.index("void Vtop___024root___eval_nba(")
    body = text[start:text.index("\n}\n", start)]
    out: dict[str, set[int]] = defaultdict(set)
    mask = 0
    for line in body.splitlines():
        found = _TRIGGER.search(line)
        if found:
            mask = int(found.group(1), 0)
            continue
        call = _CALL.search(line)
        if call:
            out[call.group(1)] |= {bit for bit in range(64) if mask >> bit & 1}
    return dict(out)


def clock_trigger(build: Path) -> int:
    """The trigger bit of the channel's clock (``@(posedge patton_player.clk)``)."""
    for path in build.glob("Vtop___024root__*__Slow.cpp"):
        found = re.search(r"region trigger index (\d+) is active: "
                          r"@\(posedge patton_player\.clk\)", path.read_text(errors="replace"))
        if found:
            return int(found.group(1))
    raise SystemExit(f"error: no clock trigger found in {build} (a debug dump Verilator writes)")


def part(symbol: str, calls: dict[str, set[int]], clock: int) -> str:
    """Which part a sampled symbol belongs to."""
    if symbol in calls:
        return "every cycle" if clock in calls[symbol] else "gated clocks"
    if _READER.search(symbol):
        return "stream reader"
    return "runtime"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instructions", type=int, default=4000)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    if args.instructions < 1:
        raise SystemExit("error: --instructions must be at least 1")
    perf = shutil.which("perf")
    if perf is None:
        raise SystemExit("error: perf (Linux perf, Debian package linux-perf) is not installed")
    with rtl_throughput.stdout_to_stderr():
        player = SchedulePlayer(ChannelParams(rows=64))
    schedule = rtl_throughput.mac_schedule(args.instructions, 64)
    driver = Driver(player.pack)
    calls = triggers(player.build_dir)
    clock = clock_trigger(player.build_dir)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        (work / "schedule").write_bytes(driver.segment(schedule, 0, DRAIN) + driver.quit())
        record = subprocess.run(
            [perf, "record", "-F", "2000", "-o", str(work / "perf.data"), "--",
             str(player.binary), f"+SCHEDULE={work / 'schedule'}",
             f"+RESULTS={work / 'results'}", f"+DRAIN={DRAIN}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if record.returncode != 0:
            raise SystemExit(f"error: perf record failed: {record.stderr.strip()[-500:]}")
        report = subprocess.run(
            [perf, "report", "-i", str(work / "perf.data"), "--stdio", "--no-children",
             "--percentage", "relative", "--sort", "sym", "-g", "none"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True).stdout
        ends = re.findall(r"^E ([0-9a-f]+) ([0-9a-f]+)$", (work / "results").read_text(), re.M)
    if not ends or int(ends[-1][1], 16) != 0:
        raise SystemExit("error: the replay did not end cleanly (no end line, or violations)")
    shares: dict[str, float] = dict.fromkeys(PARTS, 0.0)
    symbols: list[tuple[float, str, str]] = []
    for line in report.splitlines():
        found = _SAMPLE.match(line)
        if found:
            share, symbol = float(found.group(1)), found.group(2)
            shares[part(symbol, calls, clock)] += share
            symbols.append((share, symbol, part(symbol, calls, clock)))
    total = sum(shares.values())
    shares = {k: 100 * v / total for k, v in shares.items()}
    top = sorted(symbols, reverse=True)[:10]
    figures = {"instructions": args.instructions, "commands": len(schedule),
               "cycles": int(ends[-1][0], 16), "shares": shares,
               "top": [{"share": s, "symbol": sym, "part": p} for s, sym, p in top]}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"{figures['commands']:,} commands over {figures['cycles']:,} cycles; "
          "simulator samples by part:")
    for name in PARTS:
        print(f"  {name:<14} {shares[name]:5.1f} %")
    print("functions with the most samples:")
    for s, sym, p in top:
        print(f"  {s:5.1f} %  {sym}  ({p})")


if __name__ == "__main__":
    sys.exit(main())
