"""``docs/extensions.md``'s numbers: the extension ``wr16``'s Value writes (the benchmark on
both device sets), its area (synthesis with and without), and Fig. 7/8 under it (``patton
repro --device-ext aim+wr16``, stored under ``docs/img/``)."""

from __future__ import annotations

from collections.abc import Callable

from patton.eval.figures.sensitivity import PAPER  # the paper's five headline numbers

from sources.common import ROOT, Quick, Timed, pct, record, x

_VALUE_WRITES = "benchmarks/runtime_value_writes.py"
_IMG = ROOT / "docs" / "img"
_MODELS = {"llama3-8b": ("32", "Llama-3-8B"), "opt-6.7b": ("8", "OPT-6.7B")}
_PAPER_TIMING = "aimsim-2eb1ee0"

#: Quick record name -> the command whose JSON output it is (both device sets, both front
#: ends, both timing profiles).
RECORDS: dict[str, Quick] = {
    f"extensions-value-writes-{m}": Quick(
        [_VALUE_WRITES, "--model", m, "--requests", n, "--steps", "32", "--frontend", "shared",
         "per_channel", "--device-ext", "aim", "aim+wr16", "--json"], slow=True)
    for m, (n, _) in _MODELS.items()}

#: Timed record name -> how it is made (minutes of Yosys).
TIMED: dict[str, Timed] = {
    "hw-synth-wr16": Timed(["benchmarks/synth_channel.py", "--device-ext", "aim+wr16",
                            "--json"]),
    "extensions-formal": Timed(["-m", "patton.cli", "hw", "prove", "--device-ext", "aim+wr16",
                                "--out", "build/records/extensions/formal", "--json"]),
    "extensions-coverage": Timed(["-m", "patton.cli", "rtl", "coverage", "--device-ext",
                                  "aim+wr16", "--json", "--out",
                                  "build/records/extensions/coverage"]),
}

#: Stored record name -> ``patton repro``'s ``repro.json`` of each run on ``aim+wr16``.
STORED = {
    "extensions-fig7-2000": _IMG / "wr16-fig7-2000.json",
    "extensions-fig7-per-channel-2000": _IMG / "wr16-fig7-per-channel-2000.json",
    "extensions-fig8-2000": _IMG / "wr16-fig8-2000.json",
    "extensions-fig8-abk-2000": _IMG / "wr16-fig8-abk-2000.json",
}

#: The benchmark's paths, in the table's order, and what the table calls them.
_PATHS = {"cz": "Commit Zone, `W MEM` per bank (`aim`)",
          "cz_wr16": "**Commit Zone, `WR_ABK_OPEN`** (`aim+wr16`)",
          "no_cz_mem": "no CZ, `W MEM` per bank (`aim`)",
          "no_cz_abk": "no CZ, `WR_ABK` (`aim`)",
          "no_cz_wr16": "no CZ, `WR_ABK_OPEN` by row (`aim+wr16`)"}


def _writes(model: str, timing: str, frontend: str) -> dict:
    return record(f"extensions-value-writes-{model}")["timing"][f"{timing}, {frontend}"]


def _writes_table(model: str) -> Callable[[], str]:
    """The five Value-write paths: instructions, activations and energy on the shared front
    end, cycles on both front ends under both profiles."""
    def made() -> str:
        n, name = _MODELS[model]
        head = (f"| {name}, {n} requests, 32 steps | instructions | bank-row activations | "
                f"cycles, shared | cycles, per channel | cycles, shared (0f28a07) | "
                f"cycles, per channel (0f28a07) | energy (nJ), shared |")
        lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for path, label in _PATHS.items():
            s = _writes(model, _PAPER_TIMING, "shared")[path]
            cells = [f"{s['instructions']:,}", f"{s['activations']:,}"]
            for timing in (_PAPER_TIMING, "aimsim-0f28a07"):
                for f in ("shared", "per_channel"):
                    cells.append(f"{_writes(model, timing, f)[path]['cycles']:,}")
            cells.append(f"{s['energy_nj']:,.0f}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
        return "\n".join(lines)
    return made


def _ratio(model: str, frontend: str, over: str, path: str = "cz_wr16",
           timing: str = _PAPER_TIMING, what: str = "cycles") -> Callable[[], str]:
    """``over``'s figure divided by ``path``'s (how much faster ``path`` is)."""
    def made() -> str:
        w = _writes(model, timing, frontend)
        return x(w[over][what] / w[path][what])
    return made


def _synth(name: str) -> dict:
    return record(name)


def _cells(part: str | None = None) -> Callable[[], str]:
    """Cells with the extension less cells without (the channel, or one part)."""
    def made() -> str:
        on, off = _synth("hw-synth-wr16"), _synth("hw-synth")
        if part is None:
            return f"{on['total'] - off['total']:+,}"
        return f"{on['parts'][part]['cells_all'] - off['parts'][part]['cells_all']:+,}"
    return made


#: The parts whose Verilog the extension changes (the rest is byte-identical on both sets).
_CHANGED = ("checker", "decoder", "(top glue)")


def _cells_changed() -> str:
    """Cells the extension adds to the parts whose Verilog it changes."""
    on, off = _synth("hw-synth-wr16")["parts"], _synth("hw-synth")["parts"]
    return f"{sum(on[p]['cells_all'] - off[p]['cells_all'] for p in _CHANGED):+,}"


def _cells_noise() -> str:
    """The cell difference of the parts whose Verilog is the same on both sets (ABC's)."""
    on, off = _synth("hw-synth-wr16")["parts"], _synth("hw-synth")["parts"]
    moved = {p: on[p]["cells_all"] - off[p]["cells_all"] for p in on if p not in _CHANGED}
    return ", ".join(f"{'MAC units' if p == 'mac' else p} {d:+,}" for p, d in moved.items() if d)


def _cells_share() -> str:
    on, off = _synth("hw-synth-wr16")["total"], _synth("hw-synth")["total"]
    return f"{100 * (on - off) / off:.2f} %"


_HEADLINES = (("fig7_speedup_all", "Fig. 7 speedup (all)", "x"),
              ("fig7_energy_gain_all", "Fig. 7 energy gain (all)", "x"),
              ("fig8_latency_reduction", "Fig. 8 latency reduction vs wo-CZ", "%"),
              ("fig8_energy_reduction", "Fig. 8 energy reduction vs wo-CZ", "%"),
              ("fig8_value_write_speedup", "Fig. 8 Value-write speedup vs wo-CZ", "x"))


def _headlines(fig7: str, fig8: str, frontend: str) -> dict[str, float]:
    """The five headline numbers from a Fig. 7 record and a Fig. 8 record (Fig. 8 on
    ``frontend``)."""
    r7, r8 = record(fig7)["fig7"], record(fig8)["fig8"][frontend]
    return {"fig7_speedup_all": r7["speedup"]["all"],
            "fig7_energy_gain_all": r7["energy_gain"]["all"],
            "fig8_latency_reduction": r8["latency_reduction_vs_wo_cz"],
            "fig8_energy_reduction": r8["energy_reduction_vs_wo_cz"],
            "fig8_value_write_speedup": r8["value_write_speedup_vs_wo_cz"]}


def _sens(value: str) -> dict[str, float]:
    """The stored sensitivity's row (2,000 steps) of ``axis=value`` (``none``: the paper
    configuration)."""
    axis, _, v = value.partition("=")
    rows = record("repro-12000")["sensitivity"]["rows"]
    return next(r for r in rows if r["axis"] == axis and (not v or r["value"] == v))


def _fmt(value: float | None, kind: str) -> str:
    if value is None:
        return "n/a"
    return pct(value) if kind == "%" else x(value)


def _fig_table() -> str:
    """The five headlines at 2,000 steps: the stored sensitivity's rows on ``aim`` beside
    the runs on ``aim+wr16``."""
    rows = [
        ("paper", PAPER),
        ("`aim`, shared (the paper configuration), 2,000 steps", _sens("none")),
        ("**`aim+wr16`, shared**, 2,000 steps",
         _headlines("extensions-fig7-2000", "extensions-fig8-2000", "shared")),
        ("`aim`, per channel, 2,000 steps", _sens("frontend=per_channel")),
        ("**`aim+wr16`, per channel**, 2,000 steps",
         _headlines("extensions-fig7-per-channel-2000", "extensions-fig8-2000",
                    "per_channel")),
        ("`aim`, shared, wo-CZ by `WR_ABK`, 2,000 steps", _sens("wo_cz_write=abk")),
        ("**`aim+wr16`, shared, wo-CZ by `WR_ABK_OPEN`**, 2,000 steps",
         _headlines("extensions-fig7-2000", "extensions-fig8-abk-2000", "shared")),
    ]
    lines = ["| device, front end, steps | " + " | ".join(h for _, h, _ in _HEADLINES) + " |",
             "|---|" + "---:|" * len(_HEADLINES)]
    for label, row in rows:
        lines.append(f"| {label} | " + " | ".join(_fmt(row[k], kind)
                                                    for k, _, kind in _HEADLINES) + " |")
    return "\n".join(lines)


def _headline(fig7: str, fig8: str, frontend: str, key: str, kind: str) -> Callable[[], str]:
    return lambda: _fmt(_headlines(fig7, fig8, frontend)[key], kind)


_F7, _F8 = "extensions-fig7-2000", "extensions-fig8-2000"
_F7PC, _F8ABK = "extensions-fig7-per-channel-2000", "extensions-fig8-abk-2000"

def _proofs() -> str:
    """How many proofs pass with the extension on, and the WR16 ones' time."""
    proofs = record("extensions-formal")["proofs"]
    if any(p["status"] != "PASS" for p in proofs):
        raise ValueError("a proof on aim+wr16 did not pass")
    wr16 = [p for p in proofs if p["name"].endswith("+wr16")]
    return (f"all {len(proofs)} pass, the {len(wr16)} with WR16 in "
            f"{sum(p['seconds'] for p in wr16):.0f} s")


def _coverage(what: str) -> Callable[[], str]:
    def made() -> str:
        c = record("extensions-coverage")
        if what == "bins":
            return f"{c['bins_hit']} of its {c['bins_total']}"
        if what == "pairs":
            b, v = c["groups"]["ext.boundary"], c["groups"]["ext.violation"]
            if (b["hit"], v["hit"]) != (b["bins"], v["bins"]):
                raise ValueError("a WR16 pair missed")
            return f"all {b['bins']}"
        return f"{c[what]:,}"
    return made


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "ext.proofs": _proofs,
    "ext.coverage.bins": _coverage("bins"),
    "ext.coverage.pairs": _coverage("pairs"),
    "ext.coverage.commands": _coverage("commands"),
    "ext.coverage.cycles": _coverage("cycles"),
    "ext.writes.llama.cz.shared": _ratio("llama3-8b", "shared", "cz"),
    "ext.writes.llama.mem.shared": _ratio("llama3-8b", "shared", "no_cz_mem"),
    "ext.writes.llama.abk.shared": _ratio("llama3-8b", "shared", "no_cz_abk"),
    "ext.writes.llama.wr16.shared": _ratio("llama3-8b", "shared", "no_cz_wr16"),
    "ext.writes.llama.wr16.per_channel": _ratio("llama3-8b", "per_channel", "no_cz_wr16"),
    "ext.writes.llama.mem.activations": _ratio("llama3-8b", "shared", "no_cz_mem",
                                               what="activations"),
    "ext.writes.llama.wr16.activations": _ratio("llama3-8b", "shared", "no_cz_wr16",
                                                what="activations"),
    "ext.writes.opt.mem.shared": _ratio("opt-6.7b", "shared", "no_cz_mem"),
    "ext.writes.opt.abk.shared": _ratio("opt-6.7b", "shared", "no_cz_abk"),
    "ext.writes.opt.cz.shared": _ratio("opt-6.7b", "shared", "cz"),
    "ext.cells": _cells(),
    "ext.cells.share": _cells_share,
    "ext.cells.checker": _cells("checker"),
    "ext.cells.decoder": _cells("decoder"),
    "ext.cells.top": _cells("(top glue)"),
    "ext.cells.changed": _cells_changed,
    "ext.cells.noise": _cells_noise,
    "ext.fig7.speedup": _headline(_F7, _F8, "shared", "fig7_speedup_all", "x"),
    "ext.fig7.speedup.per_channel": _headline(_F7PC, _F8, "per_channel", "fig7_speedup_all",
                                              "x"),
    "ext.fig8.latency": _headline(_F7, _F8, "shared", "fig8_latency_reduction", "%"),
    "ext.fig8.vwrite": _headline(_F7, _F8, "shared", "fig8_value_write_speedup", "x"),
    "ext.fig8.vwrite.per_channel": _headline(_F7PC, _F8, "per_channel",
                                             "fig8_value_write_speedup", "x"),
    "ext.fig8.latency.per_channel": _headline(_F7PC, _F8, "per_channel",
                                              "fig8_latency_reduction", "%"),
    "ext.fig8.abk.vwrite": _headline(_F7, _F8ABK, "shared", "fig8_value_write_speedup", "x"),
    "ext.fig8.abk.latency": _headline(_F7, _F8ABK, "shared", "fig8_latency_reduction", "%"),
}

#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {
    "ext.writes.llama": _writes_table("llama3-8b"),
    "ext.writes.opt": _writes_table("opt-6.7b"),
    "ext.figures": _fig_table,
}
