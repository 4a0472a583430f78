"""One 2 KB SV reduction as one MAC run vs split into fragments (the paper's §3.2 figure).

Prints cycles and energy of one run and of ``--fragments`` fragments, on one channel and on
all 32, with and without the scores' WR_GB (:mod:`patton.eval.micro.fragmentation`).

    python benchmarks/runtime_fragmentation.py [--fragments 8] [--json]
"""

from __future__ import annotations

import argparse
import json

from patton.eval.micro.fragmentation import measure


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fragments", type=int, default=8)
    ap.add_argument("--json", action="store_true",
                    help="print the rows as one JSON list instead of the table")
    args = ap.parse_args()
    rows = []
    for channels in (1, 32):
        for with_gb in (True, False):
            c1, e1 = measure(1, channels, with_gb)
            ck, ek = measure(args.fragments, channels, with_gb)
            rows.append({"channels": channels, "gb_load": with_gb, "fragments": args.fragments,
                         "cycles_one": c1, "cycles_fragments": ck, "energy_nj_one": e1,
                         "energy_nj_fragments": ek})
    if args.json:
        print(json.dumps(rows))
        return
    print(f"{'channels':>8} {'GB load':>7} {'cycles 1':>9} {'cycles k':>9} {'latency':>8} "
          f"{'nJ 1':>9} {'nJ k':>9} {'energy':>7}")
    for r in rows:
        c1, ck, e1, ek = (r["cycles_one"], r["cycles_fragments"], r["energy_nj_one"],
                          r["energy_nj_fragments"])
        print(f"{r['channels']:8d} {str(r['gb_load']):>7} {c1:9d} {ck:9d} {ck / c1:7.2f}x "
              f"{e1:9.1f} {ek:9.1f} {ek / e1:6.2f}x")

if __name__ == "__main__":
    main()
