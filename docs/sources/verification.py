"""``docs/verification.md``'s numbers: the functional coverage run and the closure runs
(``patton rtl coverage``), the code coverage run (``--code``) and the formal proofs (timed: they
need Verilator or SymbiYosys and their figures include wall times), and the cover model's and
the proofs' counts (facts of the code)."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from patton.hw.channel import MAC_MODULE

from sources.common import ROOT, NumbersError, Timed, minutes, record, span, wall

if TYPE_CHECKING:
    from patton.sim.isa import Command
    from patton.tb.coverage import CoverageMonitor, Group

#: Where the runs write their report folders (under the repository's root).
_OUT = "build/records/verification"

#: Runs ``patton rtl coverage`` with the arguments in ARGS for each seed in SEEDS and prints
#: its JSON, by seed (whatever its exit code: a run that does not close exits 1).
_CLOSURE = """
import json, subprocess, sys
out = {}
for seed in SEEDS:
    done = subprocess.run([sys.executable, "-m", "patton.cli", "rtl", "coverage", "--json",
                           "--seed", str(seed), "--out", f"{OUT}/{seed}", *ARGS],
                          capture_output=True, text=True, check=False)
    sys.stderr.write(done.stderr)
    out[seed] = {**json.loads(done.stdout), "exit": done.returncode}
print(json.dumps(out))
"""

#: The closure run on the coverage build (``--code``), with what its ``coverage.dat`` holds
#: besides the report's figures: the points, the file's size, every line point not reached
#: and every branch point not taken but Yosys's empty ``if`` artefacts.
_CODE = """
import json, subprocess, sys
from pathlib import Path
from patton.tb import code_coverage
done = subprocess.run([sys.executable, "-m", "patton.cli", "rtl", "coverage", "--code",
                       "--json", "--out", OUT], capture_output=True, text=True, check=False)
sys.stderr.write(done.stderr)
out = {**json.loads(done.stdout), "exit": done.returncode}
dat = Path(OUT) / "coverage.dat"
points = code_coverage.read(dat)
out["dat_points"] = len(points)
out["dat_bytes"] = dat.stat().st_size
for kind in ("line", "branch"):
    out[f"missed_{kind}s"] = [[u.module, u.line, u.comment, u.source]
                              for u in code_coverage.uncovered(points, kind)
                              if "$auto$verilog_backend" not in u.source]
print(json.dumps(out))
"""

#: Every proof of ``patton hw prove``, then those the tests require to fail (the broken
#: checkers, the wrong protocol tables), each timed with its harness's conversion.
_FORMAL = """
import dataclasses, json, sys, time
from patton.hw.formal.proofs import PROOFS, SMALL, by_name, mutant
from patton.hw.formal.protocol import ProtocolProperty
from patton.hw.formal.vcd import steps
from patton.hw.isa import Opcode
from patton.sim.isa import Command
from patton.sim.protocol import RULES, Need
wrong = {
    "wrong-table": {**RULES, Command.RD: dataclasses.replace(RULES[Command.RD], need=Need.ANY)},
    "wrong-lut": {**RULES, Command.AF16: dataclasses.replace(RULES[Command.AF16], lut=False)},
}
proofs = [*PROOFS, mutant(-1), mutant(1)] + [
    dataclasses.replace(by_name("protocol-small"), name=name,
                        build=lambda rules=rules: ProtocolProperty(SMALL, rules=rules))
    for name, rules in wrong.items()]
opcodes = {op.value: op.name for op in Opcode}
out = []
for proof in proofs:
    print(proof.name, file=sys.stderr, flush=True)
    started = time.perf_counter()
    o = proof.run(OUT)
    row = {"name": proof.name, "mode": proof.mode, "depth": proof.depth, "status": o.status,
           "seconds": time.perf_counter() - started, "sby_seconds": o.seconds, "step": o.step}
    if o.trace is not None:
        prefix = "" if proof.name.startswith("mutant") else "cmd."
        trace = steps(o.trace, [prefix + "valid", prefix + "command"])[:o.step + 1]
        row["commands"] = [[k, opcodes.get(s[prefix + "command"], s[prefix + "command"])]
                           for k, s in enumerate(trace) if s[prefix + "valid"]]
    out.append(row)
print(json.dumps({"proofs": out}))
"""


def _script(text: str, out: str, **names: object) -> list[str]:
    """``python -c`` of ``text`` with ``OUT`` and ``names`` set."""
    head = "".join(f"{k} = {v!r}\n" for k, v in {"OUT": out, **names}.items())
    return ["-c", head + text]


#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {
    "verification-coverage": Timed(["-m", "patton.cli", "rtl", "coverage", "--json", "--out",
                                    f"{_OUT}/coverage"]),
    "verification-closure": Timed(_script(_CLOSURE, f"{_OUT}/closure", SEEDS=list(range(1, 9)),
                                          ARGS=["--commands", "0"])),
    "verification-closure-random": Timed(_script(
        _CLOSURE, f"{_OUT}/random", SEEDS=[1],
        ARGS=["--targeted", "0", "--commands", "0", "--budget", "200000"])),
    "verification-code-coverage": Timed(_script(_CODE, f"{_OUT}/code"), fresh_build=True),
    "verification-formal": Timed(_script(_FORMAL, f"{_OUT}/formal")),
}


# -- facts of the code --------------------------------------------------------------------


@cache
def _monitor() -> CoverageMonitor:
    """A cover model as the runs make it (default device and timing profile), nothing sampled."""
    from patton.tb.coverage import CoverageMonitor  # lazy: cocotb-coverage, Amaranth

    return CoverageMonitor(name="docs-verification")


def _group(name: str) -> Group:
    return next(g for g in _monitor().groups() if g.name == name)


def _bins(name: str) -> Callable[[], str]:
    """The cover group ``name``'s bins, with its unreachable ones if it has any."""
    def made() -> str:
        g = _group(name)
        return f"{len(g.bins)}" + (f" ({len(g.unreachable)} unreachable)" if g.unreachable
                                   else "")
    return made


def _names(commands: set[Command]) -> str:
    return ", ".join(sorted(c.name for c in commands))


def _pair_text(rule: int) -> str:
    """``WRA16 -> RD, RDMAC16``: the preceding and following implemented commands the rule
    binds at its level."""
    from patton.tb.coverage import _pairs

    pairs = _pairs(_monitor().timing.rule(rule))
    return f"{_names({p for p, _ in pairs})} -> {_names({f for _, f in pairs})}"


def _gap(rule: int) -> str:
    r = _monitor().timing.rule(rule)
    return f"`{r.expression}` = {r.cycles}"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _dominated_table() -> str:
    """The rules no legal command can meet exactly, their gap and the rules that prevent it."""
    lines = ["| rule | gap | dominated by |", "|---|---|---|"]
    timing = _monitor().timing
    for rule, by in _monitor().dominated.items():
        groups: dict[tuple[str, int], list[int]] = {}
        for o in by:
            groups.setdefault((timing.rule(o).expression, timing.rule(o).cycles), []).append(o)
        cells = "; ".join(f"{', '.join(map(str, ids))} `{expression}` = {cycles}"
                          for (expression, cycles), ids in groups.items())
        lines.append(f"| {rule} | {_gap(rule)} ({_pair_text(rule)}) | {cells} |")
    return "\n".join(lines)


#: The commands this RTL version added after the first cover model.
_NEW = ("EWMUL16", "AF16", "RDAF16")


def _new_only() -> list[int]:
    """The covered rules that bind only pairs with a command of :data:`_NEW`."""
    from patton.tb.coverage import _pairs

    timing = _monitor().timing
    return [r for r in _monitor().rules
            if all(p.name in _NEW or f.name in _NEW for p, f in _pairs(timing.rule(r)))]


def _implemented() -> frozenset:
    from patton.hw.isa import IMPLEMENTED

    return IMPLEMENTED


def _outside_isa() -> str:
    """The command ids the 5-bit command port can carry that name no ISA command of the default
    device (``aim``; an extension set's commands take ids from 26 on)."""
    from patton.hw.isa import hw_isa

    return f"{len(hw_isa().commands)}..{2 ** 5 - 1}"


def _bound(name: str) -> Callable[[], str]:
    """A proof's mode and bound as the table has them."""
    def made() -> str:
        from patton.hw.formal.proofs import by_name, mutant  # lazy: Amaranth

        p = by_name(name) if not name.startswith("mutant") else mutant()
        return f"prove, k = {p.depth}" if p.mode == "prove" else f"bmc, {p.depth} cycles"
    return made


#: The CI test of the code coverage run.
_CI_TEST = ROOT / "tests" / "test_rtl_coverage.py"


_CI_COMMANDS = r'"--commands", "(\d+)"'
_CI_LINES = r'code\["lines"\] > (0\.\d+)'


def _ci(pattern: str) -> str:
    """What ``pattern``'s group matches in the CI test's code coverage test."""
    text = _CI_TEST.read_text()
    body = text[text.index("def test_code_coverage_of_the_closure_run"):]
    found = re.search(pattern, body)
    if found is None:
        raise NumbersError(f"{_CI_TEST.relative_to(ROOT)}: no {pattern!r} in "
                           "test_code_coverage_of_the_closure_run")
    return found.group(1)


# -- the functional coverage runs ---------------------------------------------------------


def _cov() -> dict:
    """The seed-1 run (:data:`TIMED` ``verification-coverage``), checked to have closed with the
    RTL agreeing with the models (the prose says so)."""
    run = record("verification-coverage")
    if not (run["closed"] and run["agree"] and run["rejected_errors"] == 0):
        raise NumbersError("verification-coverage: the run did not close or the RTL disagreed "
                           "with the models; the page says otherwise")
    return run


def _of(hit: str, total: str) -> Callable[[], str]:
    return lambda: f"{_cov()[hit]}/{_cov()[total]}"


def _legal() -> str:
    """Rules met exactly by a legal command, of those that can be (not dominated)."""
    run = _cov()
    return f"{run['rules_legal_boundary_hit']}/{run['rules_total'] - run['rules_dominated']}"


def _closure() -> list[dict]:
    """The closure-only runs, by seed, checked to have closed."""
    runs = list(record("verification-closure").values())
    if not all(r["closed"] and r["agree"] for r in runs):
        raise NumbersError("verification-closure: a run did not close")
    return runs


def _random() -> dict:
    """The plain constrained-random run (nothing aimed at the holes)."""
    (run,) = record("verification-closure-random").values()
    return run


def _seconds(value: float) -> str:
    return f"{value:.1f} s"


# -- the code coverage run ----------------------------------------------------------------


def _code() -> dict:
    return record("verification-code-coverage")


def _fraction(hit: int, total: int, percent: bool = True) -> str:
    if not total:
        return "-"
    text = f"{hit:,}/{total:,}"
    return f"{text} ({_percent(hit, total)})" if percent else text


def _percent(hit: int, total: int) -> str:
    share = 100 * hit / total
    return "100 %" if hit == total else f"{share:.1f} %"


#: The code coverage table's rows: label, the report's modules (added; ``patton_mat__*``: the
#: mat macro, named after its organisation), whether the toggles get a percentage (not for
#: the mat macro and the testbench).
_CODE_ROWS: tuple[tuple[str, tuple[str, ...], bool], ...] = (
    ("patton_channel (the top: command port, bank selection, stage registers, returns)",
     ("patton_channel",), True),
    ("af_operands* (AF16 operands and the MAC operand multiplexers)",
     ("patton_channel.af_operands*",), True),
    ("af_operands*.bias_load (bias(v))", ("patton_channel.af_operands*.bias_load",), True),
    ("bank*", ("patton_channel.bank*",), True),
    ("bank*.mat", ("patton_channel.bank*.mat",), True),
    ("bias*", ("patton_channel.bias*",), True),
    ("bias_segment*, mac_segment* (AF segment decoders)",
     ("patton_channel.bias_segment*", "patton_channel.mac_segment*"), True),
    ("checker", ("patton_channel.checker",), True),
    ("decoder", ("patton_channel.decoder",), True),
    ("ewmul*", ("patton_channel.ewmul*",), True),
    ("gb", ("patton_channel.gb",), True),
    ("patton_mac (the MAC unit: one module, 16 instances)", ("patton_mac",), True),
    ("readout*", ("patton_channel.readout*",), True),
    ("patton_mat (macro), patton_mat_dump", ("patton_mat__*", "patton_mat_dump"), False),
    ("patton_player (testbench)", ("patton_player",), False),
)

#: The modules whose every line the page says ran.
_FULL_LINES = ("patton_channel", "patton_channel.bank*", "patton_channel.checker",
               "patton_channel.decoder", "patton_channel.af_operands*",
               "patton_channel.af_operands*.bias_load", "patton_channel.bias*",
               "patton_channel.bias_segment*", "patton_channel.mac_segment*", "patton_mac")


def _matches(module: str, name: str) -> bool:
    return module.startswith(name[:-1]) if name.endswith("__*") else module == name


_KINDS = ("modules", "lines", "lines_hit", "branches", "branches_hit", "toggles", "toggles_hit")


def _module_row(modules: tuple[str, ...]) -> dict[str, int]:
    by = _code()["code"]["by_module"]
    return {k: sum(r[k] for m, r in by.items() if any(_matches(m, n) for n in modules))
            for k in _KINDS}


def _code_table() -> str:
    """The per-module code coverage table (every module of the report in one row)."""
    code = _code()["code"]
    named = [n for _, modules, _ in _CODE_ROWS for n in modules]
    if not all(sum(_matches(m, n) for n in named) == 1 for m in code["by_module"]):
        raise NumbersError("verification-code-coverage: the report's modules are "
                           f"{sorted(code['by_module'])}; docs/sources/verification.py "
                           "names them in _CODE_ROWS")
    lines = ["| module | modules | lines | branches | toggles |", "|---|---:|---:|---:|---:|"]
    for label, modules, percent in _CODE_ROWS:
        r = _module_row(modules)
        lines.append(f"| {label} | {r['modules']} | {_fraction(r['lines_hit'], r['lines'], False)}"
                     f" | {_fraction(r['branches_hit'], r['branches'], False)}"
                     f" | {_fraction(r['toggles_hit'], r['toggles'], percent)} |")
    lines.append(f"| **total** | {sum(_module_row(m)['modules'] for _, m, _ in _CODE_ROWS)}"
                 f" | **{_fraction(code['lines_hit'], code['lines'])}**"
                 f" | **{_fraction(code['branches_hit'], code['branches'])}**"
                 f" | **{_fraction(code['toggles_hit'], code['toggles'])}** |")
    return "\n".join(lines)


#: The report rows with line points not reached, as the page accounts for them.
_MISSED_ROWS = ("patton_channel.readout*", "patton_channel.ewmul*", "patton_mat__*",
                "patton_player")


def _missed(group: str) -> list[list]:
    """The line points not reached in the modules of the report row ``group`` (checked: every
    such point is in a row the page accounts for, and no module of :data:`_FULL_LINES` has
    one)."""
    from patton.tb.code_coverage import module_group

    run = _code()
    rows = {module_group(m[0]) for m in run["missed_lines"]}
    if not all(any(_matches(r, n) for n in _MISSED_ROWS) for r in rows):
        raise NumbersError(f"verification-code-coverage: line points not reached in {rows}; "
                           f"the page accounts for {_MISSED_ROWS}")
    by = run["code"]["by_module"]
    if any(by[m]["lines_hit"] != by[m]["lines"] for m in _FULL_LINES):
        raise NumbersError("verification-code-coverage: a line of "
                           f"{', '.join(_FULL_LINES)} did not run; the page says all did")
    return [m for m in run["missed_lines"] if _matches(module_group(m[0]), group)]


def _copies(group: str) -> list[int]:
    """The numbers of ``group``'s copies (``mac*``) that left a line point not reached."""
    return sorted({int(re.findall(r"\d+", m[0].rsplit(".", 1)[-1])[0]) for m in _missed(group)})


def _bypass(missed: list) -> bool:
    """A branch of the global buffer's write-first bypass (a lane written in the cycle its
    column is read)."""
    return missed[0] == "patton_channel.gb" and "rp__addr == wp__addr" in missed[3]


def _branches_testbench() -> str:
    """The branch points not taken besides Yosys's artefacts and the global buffer's bypass,
    checked to be the testbench's (the player, the mat macro's ``+MATS`` dump)."""
    missed = _code()["missed_branchs"]  # the record's key, as _CODE spells it
    if any(m[0].startswith(("patton_channel", MAC_MODULE)) and not _bypass(m) for m in missed):
        raise NumbersError("verification-code-coverage: a branch of the channel other than "
                           "the global buffer's bypass was not taken; the page says every one "
                           "was")
    if any(m[0].startswith("patton_mat") and "MATS" not in m[3] for m in missed):
        raise NumbersError("verification-code-coverage: a branch of the mat macro other than "
                           "its +MATS dump was not taken")
    code = _code()["code"]
    if code["branches"] - code["branches_hit"] != code["branch_artefacts"] + len(missed):
        raise NumbersError("verification-code-coverage: the branch points do not add up")
    return str(sum(not _bypass(m) for m in missed))


def _branches_bypass() -> str:
    """The global buffer's bypass branches not taken."""
    return str(sum(_bypass(m) for m in _code()["missed_branchs"]))


def _toggle_percent(group: str) -> str:
    r = _module_row((group,))
    return _percent(r["toggles_hit"], r["toggles"])


# -- the formal proofs --------------------------------------------------------------------


def _proof(name: str):  # noqa: ANN202 - a patton.hw.formal.proofs.Proof
    from patton.hw.formal.proofs import by_name  # lazy: Amaranth

    return by_name(name)


def _proof_names() -> list[str]:
    """The proofs ``patton hw prove`` runs."""
    from patton.hw.formal.proofs import PROOFS  # lazy: Amaranth

    return [p.name for p in PROOFS]


def _proofs() -> dict[str, dict]:
    return {p["name"]: p for p in record("verification-formal")["proofs"]}


def _proof_seconds(name: str) -> str:
    return _seconds(_proofs()[name]["seconds"])


def _counterexample(name: str) -> str:
    """``ACT at step 0, ACT at step 4 (failing step 4)``: the broken checker's counterexample,
    its last two ACTs."""
    p = _proofs()[name]
    acts = [k for k, command in p["commands"] if command == "ACT"][-2:]
    return f"ACT at step {acts[0]}, ACT at step {acts[1]} (failing step {p['step']})"


def _formal_table() -> str:
    """Each proof's verdict and wall time (harness conversion and SymbiYosys)."""
    from patton.hw.formal.proofs import PROOFS  # lazy: Amaranth

    lines = ["| proof | status | wall time |", "|---|---|---:|"]
    for name, p in _proofs().items():
        if p["status"] == "PASS":
            status = ("PASS (k-induction)" if p["mode"] == "prove"
                      else f"PASS ({p['depth']} cycles)")
        elif name.startswith("mutant"):
            status = f"FAIL as required; counterexample: {_counterexample(name)}"
        else:
            status = f"FAIL as required; last command an {p['commands'][-1][1]}"
        if p["status"] != "PASS" and name in {q.name for q in PROOFS}:
            raise NumbersError(f"verification-formal: the proof {name} did not pass")
        lines.append(f"| {name} | {status} | {_seconds(p['seconds'])} |")
    return "\n".join(lines)


def _span_int(values: list[int]) -> str:
    """``3,200 to 4,400`` (one value when all are equal)."""
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,} to {high:,}"


def _span_seconds(values: list[float]) -> str:
    low, high = f"{min(values):.1f}", f"{max(values):.1f}"
    return f"{low} s" if low == high else f"{low} to {high} s"


def _seeds() -> str:
    seeds = sorted(int(s) for s in record("verification-closure"))
    if seeds != list(range(seeds[0], seeds[-1] + 1)):
        raise NumbersError("verification-closure: the seeds are not a range")
    return f"{seeds[0]} to {seeds[-1]}"


#: The holes the plain constrained-random run leaves, as the page describes them.
_RANDOM_HOLES = {"command.state": ["ACT16 same register", "AF16 partial register"],
                 "protocol.error": ["PARTNER"]}


def _random_bins() -> str:
    run = _random()
    if run["closed"] or run["holes"] != _RANDOM_HOLES:
        raise NumbersError("verification-closure-random: the holes left are "
                           f"{run['holes']}; the page names {_RANDOM_HOLES}")
    return f"{run['bins_hit']}/{run['bins_total']}"


#: Number name -> how it is made from the records (or the code).
NUMBERS: dict[str, Callable[[], str]] = {
    **{f"verification.groups.{g}": _bins(g)
       for g in ("timing.boundary", "timing.legal", "timing.violation", "command.state",
                 "command.rejected", "protocol.error", "mac.cross", "ewmul.bg", "af.lut",
                 "reads.return")},
    "verification.implemented": lambda: str(len(_implemented())),
    "verification.rules": lambda: str(len(_monitor().rules)),
    "verification.rules.before_new": lambda: str(len(_monitor().rules) - len(_new_only())),
    "verification.rules.new_only": lambda: _and([f"{r} {_pair_text(r)}" for r in _new_only()]),
    "verification.rules.dominated": lambda: str(len(_monitor().dominated)),
    # the seed-1 run (the README quotes these)
    "verification.coverage.seed": lambda: str(_cov()["seed"]),
    "verification.coverage.commands": lambda: f"{_cov()['commands']:,}",
    "verification.coverage.boundary": _of("rules_boundary_hit", "rules_total"),
    "verification.coverage.violation": _of("rules_violation_hit", "rules_total"),
    "verification.coverage.legal": _legal,
    "verification.coverage.dominated": lambda: str(_cov()["rules_dominated"]),
    "verification.coverage.bins": _of("bins_hit", "bins_total"),
    "verification.coverage.unreachable": lambda: str(_cov()["bins_unreachable"]),
    "verification.coverage.segments": lambda: str(_cov()["segments"]),
    "verification.coverage.cycles": lambda: f"{_cov()['cycles']:,}",
    "verification.coverage.seconds": lambda: _seconds(_cov()["seconds"]),
    "verification.coverage.channel_seconds": lambda: _seconds(_cov()["channel_seconds"]),
    "verification.coverage.flagged": lambda: f"{_cov()['flagged']:,}",
    "verification.coverage.disagreements": lambda: str(_cov()["disagreements"]),
    "verification.coverage.reads": lambda: f"{_cov()['reads']:,}",
    "verification.coverage.mat_words": lambda: f"{_cov()['mat_words']:,}",
    "verification.coverage.differ": lambda: str(_cov()["read_mismatches"]
                                                + _cov()["mat_mismatches"]),
    "verification.coverage.closure.commands": lambda: _span_int(
        [r["commands"] for r in _closure()]),
    "verification.coverage.closure.seeds": _seeds,
    "verification.coverage.closure.seconds": lambda: _span_seconds(
        [r["seconds"] for r in _closure()]),
    "verification.coverage.random.commands": lambda: f"{_random()['commands']:,}",
    "verification.coverage.random.bins": _random_bins,
    # the proofs' bounds (the code's) and their runs
    **{f"verification.bound.{name}": _bound(name)
       for name in ("timing-aimsim-0f28a07", "protocol", "protocol-small", "gb-watched",
                    "gb-any", "mat-watched", "mat-init", "row-buffer", "mutant")},
    "verification.bound.timing.k": lambda: str(_proof("timing-aimsim-0f28a07").depth),
    "verification.bound.gb-any.cycles": lambda: str(_proof("gb-any").depth),
    "verification.outside_isa": _outside_isa,
    "verification.ci.commands": lambda: f"{int(_ci(_CI_COMMANDS)):,}",
    "verification.ci.lines": lambda: f"{100 * float(_ci(_CI_LINES)):g} %",
    "verification.ci.branches": lambda: _ci(r"0 <= missed - bypass <= (\d+)"),
    "verification.ci.bypass": lambda: _ci(r"0 <= bypass <= (\d+)"),
    # the code coverage run (the README quotes the lines, branches and toggles)
    "verification.coverage.code.seed": lambda: str(_code()["seed"]),
    "verification.coverage.code.commands": lambda: f"{_code()['commands']:,}",
    "verification.coverage.code.wall": lambda: minutes(wall("verification-code-coverage")),
    "verification.coverage.code.seconds": lambda: minutes(_code()["seconds"]),
    "verification.coverage.code.dat_mb": lambda: f"{_code()['dat_bytes'] / 1e6:.0f} MB",
    "verification.coverage.code.dat_points": lambda: f"{_code()['dat_points']:,}",
    "verification.coverage.code.lines": lambda: _fraction(_code()["code"]["lines_hit"],
                                                          _code()["code"]["lines"]),
    "verification.coverage.code.lines_missed": lambda: str(
        _code()["code"]["lines"] - _code()["code"]["lines_hit"]),
    **{f"verification.coverage.code.missed.{name}": lambda row=row: str(len(_missed(row)))
       for name, row in (("readout", "patton_channel.readout*"),
                         ("ewmul", "patton_channel.ewmul*"), ("patton_mat", "patton_mat__*"),
                         ("patton_player", "patton_player"))},
    "verification.coverage.code.ewmul_units": lambda: _and(
        [str(u) for u in _copies("patton_channel.ewmul*")]),
    "verification.coverage.code.player_line": lambda: _and(
        [str(m[1]) for m in _missed("patton_player")]),
    "verification.coverage.code.branches": lambda: _fraction(
        _code()["code"]["branches_hit"], _code()["code"]["branches"], False),
    "verification.coverage.code.branches_missed": lambda: str(
        _code()["code"]["branches"] - _code()["code"]["branches_hit"]),
    "verification.coverage.code.branch_artefacts": lambda: str(
        _code()["code"]["branch_artefacts"]),
    "verification.coverage.code.branches_testbench": _branches_testbench,
    "verification.coverage.code.branches_bypass": _branches_bypass,
    "verification.coverage.code.toggles": lambda: _percent(_code()["code"]["toggles_hit"],
                                                           _code()["code"]["toggles"]),
    "verification.coverage.code.toggles.bias": lambda: _toggle_percent("patton_channel.bias*"),
    "verification.coverage.code.toggles.bias_load": lambda: _toggle_percent(
        "patton_channel.af_operands*.bias_load"),
    "verification.formal.timing_seconds": lambda: _proof_seconds("timing-aimsim-0f28a07"),
    "verification.formal.mutant_minus": lambda: _counterexample("mutant-rule27-1"),
    "verification.formal.mutant_plus": lambda: _counterexample("mutant-rule27+1"),
    "verification.formal.storage_seconds": lambda: span(
        [_proofs()[p]["seconds"] for p in ("mat-watched", "mat-init", "row-buffer")],
        _seconds),
    "verification.formal.gb_any_seconds": lambda: _proof_seconds("gb-any"),
    "verification.formal.total_seconds": lambda: minutes(
        sum(p["seconds"] for p in _proofs().values())),
    "verification.formal.proofs": lambda: str(len(_proof_names())),
    "verification.formal.prove_seconds": lambda: minutes(
        sum(_proofs()[p]["seconds"] for p in _proof_names())),
}

#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {
    "verification.dominated": _dominated_table,
    "verification.formal": _formal_table,
    "verification.code": _code_table,
}
