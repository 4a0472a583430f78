"""``docs/cent.md``'s measured numbers: CENT's traces on the cycle model beside the public
simulator (``benchmarks/cent_traces.py``) and two CENT blocks on the RTL."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Timed, record, span

#: Where, on the machine that makes the record, CENT's generated traces (``traces/``: the
#: configurations ``docs/cent.md`` lists, made by CENT's generator) and the public simulator
#: built at both commits (``aimsim-COMMIT/``) are, given as ``$CENT_SWEEP``.
_SWEEP = "$CENT_SWEEP"

#: Timed record name -> how it is made (whole-process wall times on this machine).
TIMED: dict[str, Timed] = {
    "cent-traces": Timed(["benchmarks/cent_traces.py", f"{_SWEEP}/traces",
                          "--aimsim", f"0f28a07={_SWEEP}/aimsim-0f28a07",
                          "--aimsim", f"2eb1ee0={_SWEEP}/aimsim-2eb1ee0", "--json"]),
    "cent-rtl-llama7b": Timed(["-m", "patton.cli", "rtl", "run",
                               "tests/data/aim/cent/cent_llama7b_mp_1dev_seq512.trace",
                               "--rows", "1024", "--json", "--jobs", "2"]),
}


def _rows() -> list[dict]:
    """The benchmark's rows: one per trace and timing profile."""
    return record("cent-traces")


def _table() -> str:
    """The benchmark's table, as it prints it."""
    lines = ["| trace | instructions | profile | cycles | DRAM commands | wide lines | exact "
             "| ours s | public s | public / ours |",
             "|---|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in _rows():
        exact = "yes" if r["differences"] == 0 else f"{r['differences']} differences"
        lines.append(f"| {r['trace']} | {r['instructions']:,} | {r['profile']} | "
                     f"{r['cycles']:,} | {r['commands']:,} | {r['wide_lines']} | {exact} | "
                     f"{r['seconds']:.2f} | {r['public_seconds']:.2f} | {r['ratio']:.2f} |")
    return "\n".join(lines)


def _exact() -> str:
    """``N of M runs exact``."""
    rows = _rows()
    return f"{sum(r['differences'] == 0 for r in rows)} of {len(rows)} runs exact"


def _ratios(prefix: str) -> str:
    """The public simulator's time over ours on the traces whose name starts with
    ``prefix``: ``low-highx``."""
    ratios = [r["ratio"] for r in _rows() if r["trace"].startswith(prefix)]
    return span(ratios, lambda v: f"{v:.1f}x")


def _commands(prefix: str) -> str:
    """The DRAM commands of the traces starting with ``prefix``, in millions: ``12-13 M``."""
    counts = [r["commands"] / 1e6 for r in _rows() if r["trace"].startswith(prefix)]
    return span(counts, lambda v: f"{v:.0f} M")


def _small_public() -> str:
    """The public simulator's times on the traces where it beats our process."""
    times = [r["public_seconds"] for r in _rows() if r["ratio"] < 1]
    return span(times, lambda v: f"{v:.1f} s")


def _rtl_row(name: str, label: str) -> str:
    """One trace's row of ``patton rtl run --json``."""
    r = record(name)
    return (f"| {label} | {r['commands']:,} | {r['rejections']} | {r['reads']:,} | "
            f"{r['mat_words']:,} | {r['violations']} / {r['model_violations']} | "
            f"{r['replay_seconds']:.1f} s | {r['cycles_per_second']:,} | "
            f"{r['wall_seconds']:.1f} s |")


def _rtl_table() -> str:
    """The two CENT blocks replayed on the RTL."""
    return "\n".join([
        "| trace | commands | refused | reads bit-exact | mat words bit-exact | violations "
        "(RTL / model) | replays | simulated channel cycles/s | wall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        _rtl_row("rtl-cent-tiny", "cent_tiny_llama_h8_pp_8cpb_seq64"),
        _rtl_row("cent-rtl-llama7b", "cent_llama7b_mp_1dev_seq512 (two `EWMUL 256`)")])


#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {
    "cent.traces": lambda: _table() + "\n\n" + _exact(),
    "cent.rtl": _rtl_table,
}

#: Number name -> how it is made.
NUMBERS: dict[str, Callable[[], str]] = {
    "cent.configurations": lambda: str(len({r["trace"] for r in _rows()})),
    "cent.exact": _exact,
    "cent.ratio.70b_pp": lambda: _ratios("cent_llama70b_gqa_pp"),
    "cent.commands.70b_pp": lambda: _commands("cent_llama70b_gqa_pp"),
    "cent.ratio.7b_4096": lambda: _ratios("cent_llama7b_pp_8cpb_seq4096"),
    "cent.small_public": _small_public,
}
