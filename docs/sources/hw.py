"""``docs/hw.md``'s numbers: facts of the channel's code (the rule mask, the age registers'
ceiling, the LUT rows' words) and the whole channel's synthesis with a native Yosys (timed, the
README's figures too)."""

from __future__ import annotations

from collections.abc import Callable

from patton.hw.af import lut_words
from patton.hw.isa import RULES
from patton.hw.mat import mat_verilog
from patton.hw.params import ChannelParams
from patton.hw.timing_checker import checked_rules
from patton.sim.timing import TIMING

from sources.common import Timed, minutes, record, wall

_SYNTH = "benchmarks/synth_channel.py"

#: Timed record name -> how it is made (minutes of Yosys; the cell counts are deterministic).
TIMED: dict[str, Timed] = {
    "hw-synth": Timed([_SYNTH, "--json"]),
    "hw-synth-noabc": Timed([_SYNTH, "--noabc", "--json"]),
}

#: The record of each synthesis: ``synth`` (with ABC) and ``synth -noabc``.
_RUNS = {"abc": "hw-synth", "noabc": "hw-synth-noabc"}

#: The table's parts (``synth_channel.py``'s names) and what the table calls them.
_PARTS = {
    "mac": "`MacUnit` (`docs/hw-mac.md`)",
    "(top glue)": "top (`Channel` glue: stage registers, operand copies, return pipelines, "
                  "muxes)",
    "ewmul": "`EwmulUnit` (EWMUL16, one per bank group)",
    "gb": "`GlobalBuffer` (64 x 256-bit registers)",
    "af_operands": "`AfOperands` (AF16's table operands, without its `BiasLoad`)",
    "checker": "`TimingChecker`",
    "readout": "`Bf16Readout`",
    "mac_segment": "`AfSegment`, MAC side (AF16's segment of a MAC result)",
    "bias_segment": "`AfSegment`, bias side",
    "decoder": "`Decoder`",
    "bias": "`BiasLoad` (the MAC's bias)",
    "af_operands.bias_load": "`BiasLoad` inside `AfOperands`",
    "bank": "`Bank` (open/row registers)",
    "bank.mat": "mat wrapper (the black-box macro, one cell)",
}


def _synth(way: str) -> dict:
    """The whole channel's synthesis ``way`` (``abc`` or ``noabc``)."""
    return record(_RUNS[way])


def _part(way: str, part: str) -> dict:
    """One part's cells in the synthesis ``way``."""
    return _synth(way)["parts"][part]


def _share(part: str) -> str:
    """``part``'s share of the channel's cells with ``synth``: ``63 %``."""
    return f"{100 * _part('abc', part)['cells_all'] / _synth('abc')['total']:.0f} %"


def _each(cells: dict) -> str:
    """One instance's cells, ``low-high`` when the instances differ."""
    low, high = cells["cells_each_min"], cells["cells_each_max"]
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _synth_table() -> str:
    """Instances and cells of every part with ``synth`` and ``synth -noabc``, largest first."""
    abc, noabc = _synth("abc")["parts"], _synth("noabc")["parts"]
    if set(abc) != set(_PARTS) or set(noabc) != set(_PARTS):
        raise KeyError(f"parts {sorted(set(abc) | set(noabc))}, the table has {sorted(_PARTS)}")
    lines = ["| part | instances | cells each (`synth`) | cells, all (`synth`) | cells, all "
             "(`synth -noabc`) |", "|---|---:|---:|---:|---:|"]
    for part in sorted(_PARTS, key=lambda p: -abc[p]["cells_all"]):
        lines.append(f"| {_PARTS[part]} | {abc[part]['instances']} | {_each(abc[part])} | "
                     f"{abc[part]['cells_all']:,} | {noabc[part]['cells_all']:,} |")
    lines.append(f"| **channel** | | | **{_synth('abc')['total']:,}** | "
                 f"**{_synth('noabc')['total']:,}** |")
    return "\n".join(lines)


def _commands() -> str:
    """The two synthesis commands, each with its wall time and peak memory."""
    def cost(way: str) -> str:
        return f"{minutes(wall(_RUNS[way]))}, {_synth(way)['peak_rss_mib'] / 1024:.1f} GiB peak"
    version = _synth("abc")["yosys"].split()[1]
    return "\n".join([
        "```sh",
        f"apt-get install yosys                         # Debian's {version}; not a project "
        "dependency",
        f"python benchmarks/synth_channel.py            # synth (with ABC): {cost('abc')}",
        f"python benchmarks/synth_channel.py --noabc    # synth -noabc: {cost('noabc')}",
        "```"])


def _lut_text() -> str:
    """The Verilog text of the mat macro's ``lut_word`` cases (one line per non-zero word)."""
    text = mat_verilog(params=ChannelParams())
    size = sum(len(line) + 1 for line in text.splitlines()
               if " lut_word = " in line and "default:" not in line)
    return f"{size / 1000:.0f} KB"


def _saturate() -> int:
    """The largest gap of a rule the checker checks (its age registers' ceiling)."""
    return max(gap for table in checked_rules(TIMING).values() for checks in table.values()
               for _, _, gap in checks)


#: Number name -> how it is made from the code and the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "hw.rules": lambda: str(RULES),
    "hw.checker.saturate": lambda: str(_saturate()),
    "hw.lut.words": lambda: f"{sum(1 for w in lut_words(ChannelParams()) if w):,}",
    "hw.lut.text": _lut_text,
    "hw.synth.yosys": lambda: _synth("abc")["yosys"].split()[1],
    "hw.synth.total": lambda: f"{_synth('abc')['total']:,}",
    "hw.synth.noabc.total": lambda: f"{_synth('noabc')['total']:,}",
    "hw.synth.mac.share": lambda: _share("mac"),
    "hw.synth.ewmul.share": lambda: _share("ewmul"),
    "hw.synth.global_buffer.share": lambda: _share("gb"),
}

#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {"hw.synth": _synth_table, "hw.synth.commands": _commands}
