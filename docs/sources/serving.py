"""``docs/serving.md``'s measured numbers: the engine's speed beside real vLLM's
(``benchmarks/serving_engine_speed.py``) and the golden runs recorded from real vLLM."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable

from sources.common import GOLDEN_DIR, ROOT, Quick, Timed, golden, record

_SPEED = "benchmarks/serving_engine_speed.py"
#: Real vLLM's Python (the lean CPU install of ``docs/serving.md``), given as ``$VLLM_PYTHON``.
_VLLM = ["--python", "$VLLM_PYTHON"]
_PATTON = ["--runtime", "patton", "--num-blocks", "0"]

#: Timed record name -> how it is made (steps per CPU-second on this machine).
TIMED: dict[str, Timed] = {
    "serving-speed": Timed([_SPEED, *_VLLM, "--json"]),
    "serving-speed-patton": Timed([_SPEED, *_PATTON, "--no-vllm", "--json"]),
    "serving-speed-patton-vllm": Timed([_SPEED, *_PATTON, *_VLLM, "--json"]),
    "serving-speed-patton-1024": Timed([_SPEED, "--runtime", "patton", "--num-blocks",
                                        "1024", "--no-vllm", "--json"]),
}


def _row(name: str, engine: str) -> dict:
    """The row of ``engine`` in the speed record ``name``."""
    return next(r for r in record(name)["rows"] if r["engine"] == engine)


def _speed(name: str, engine: str, key: str = "steps_per_s") -> Callable[[], str]:
    """A figure of one engine's row, with thousands separators."""
    return lambda: f"{_row(name, engine)[key]:,}"


#: Number name -> how it is made.
NUMBERS: dict[str, Callable[[], str]] = {
    "serving.speed.requests": _speed("serving-speed", "embedded", "requests"),
    "serving.speed.embedded": _speed("serving-speed", "embedded"),
    "serving.speed.embedded.clients": _speed("serving-speed", "embedded",
                                             "with_clients_steps_per_s"),
    "serving.speed.embedded.wall": _speed("serving-speed", "embedded", "wall_steps_per_s"),
    "serving.speed.vllm": _speed("serving-speed", "vllm-0.33.0"),
    "serving.speed.vllm.wall": _speed("serving-speed", "vllm-0.33.0", "wall_steps_per_s"),
    "serving.speed.ratio": lambda: f"{_row('serving-speed', 'embedded')['speedup_vs_vllm']}x",
    "serving.speed.same": lambda: (
        f"`same_steps={_row('serving-speed', 'vllm-0.33.0')['same_steps']}` and "
        f"`same_requests={_row('serving-speed', 'vllm-0.33.0')['same_requests']}`"),
}


#: The golden runs the table shows, and what each exercises.
_GOLDEN_WHAT = {
    "c4-p8-ample": "prefix hits across turns, no pressure",
    "c8-p16-evict": "eviction of idle conversations' blocks, chunked prefill, some preemption",
    "c8-p32-preempt": "heavy capacity pressure: recompute preemptions",
    "c4-p4-seqs2": "fewer sequence slots than clients (waiting queue), 64-token chunks, "
                   "conversations leaving at L",
    "c2-p6-bs8": "block size 8, three conversations per client",
    "c16-p32-short": "short context: most conversations leave after turn 1, the file runs "
                     "out, every client stops (`complete`)",
}


def _golden_table() -> str:
    """The golden runs' parameters and reports, one row each."""
    lines = ["| name | C | P | block | blocks | seqs | batched | L | steps (limit) | requests "
             "| hit rate | preemptions | recomputed | what it exercises |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, what in _GOLDEN_WHAT.items():
        run = golden(name)
        p, r = run["params"], run["report"]
        cells = [f"`{name}`", *(str(p[k]) for k in (
            "clients", "pool", "block_size", "num_blocks", "max_num_seqs",
            "max_num_batched_tokens", "max_model_len")),
            f"{r['steps']} ({p['max_steps']})", str(r["requests"]), f"{r['hit_rate']:.3f}",
            str(r["preemptions"]), str(r["recomputed_tokens"]), what]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {"serving.golden": _golden_table}

NUMBERS.update({
    "serving.golden.ample.recomputed": lambda: str(golden("c4-p8-ample")["report"]
                                                    ["recomputed_tokens"]),
    "serving.golden.ample.requests": lambda: str(golden("c4-p8-ample")["report"]["requests"]),
    "serving.patton.embedded": _speed("serving-speed-patton", "embedded"),
    "serving.patton.patton": _speed("serving-speed-patton", "embedded+patton"),
    "serving.patton.patton.clients": _speed("serving-speed-patton", "embedded+patton",
                                            "with_clients_steps_per_s"),
    "serving.patton.vllm.embedded": _speed("serving-speed-patton-vllm", "embedded"),
    "serving.patton.vllm.patton": _speed("serving-speed-patton-vllm", "embedded+patton"),
    "serving.patton.vllm.patton.clients": _speed("serving-speed-patton-vllm", "embedded+patton",
                                                 "with_clients_steps_per_s"),
    "serving.patton.vllm.vllm": _speed("serving-speed-patton-vllm", "vllm-0.33.0"),
    "serving.patton.vllm.same": lambda: str(_row("serving-speed-patton-vllm", "vllm-0.33.0")
                                            ["same_steps"]),
    "serving.patton.vllm.ratio": lambda: (
        f"{_row('serving-speed-patton-vllm', 'embedded+patton')['speedup_vs_vllm']}x"),
    "serving.patton.1024.refusals": _speed("serving-speed-patton-1024", "embedded+patton",
                                           "refusals"),
    "serving.patton.1024.steps": _speed("serving-speed-patton-1024", "embedded+patton", "steps"),
    "serving.patton.1024": _speed("serving-speed-patton-1024", "embedded+patton"),
})


_CONVERSATIONS = ROOT / "tests" / "data" / "serving" / "sharegpt-llama3-300.jsonl"


def _lines() -> list[list[list[int]]]:
    """The messages (token ids) of each conversation of the committed 300-conversation file."""
    return [json.loads(line)["messages"]
            for line in _CONVERSATIONS.read_text().splitlines() if line.strip()]


def _turns() -> list[int]:
    """The user + assistant turns of each conversation of the 300-conversation file."""
    return [len(messages) // 2 for messages in _lines()]


def _golden_sizes() -> tuple[int, int]:
    """The golden files' bytes on disk and as text."""
    files = sorted(GOLDEN_DIR.glob("*.json.gz"))
    return (sum(f.stat().st_size for f in files),
            sum(len(gzip.decompress(f.read_bytes())) for f in files))


NUMBERS.update({
    "serving.file.kb": lambda: f"{_CONVERSATIONS.stat().st_size / 1000:.0f} KB",
    "serving.file.tokens": lambda: f"{sum(len(m) for line in _lines() for m in line):,}",
    "serving.file.turns": lambda: f"{sum(_turns()) / len(_turns()):.2f}",
    "serving.file.turns_max": lambda: str(max(_turns())),
    "serving.golden.kb": lambda: f"{_golden_sizes()[0] / 1000:.0f} KB",
    "serving.golden.text_mb": lambda: f"{_golden_sizes()[1] / 1e6:.1f} MB",
})


# ------------------------------------------ Fig. 9, from the full-scale run (``repro-12000``)
#: The loads of ``patton repro fig9`` in the table's order, with their labels.
_LOADS = {"light": "light", "normal": "**normal** (the paper's pool)",
          "pressure": "**pressure**", "overload": "> 250 k live"}
_RUNTIMES = ("gpu", "patton", "patton-no-o2v")


def _fig9() -> dict:
    """The full-scale run's Fig. 9 (``docs/img/repro-12000.json``)."""
    return record("repro-12000")["fig9"]


def _run(load: str, runtime: str) -> dict:
    return _fig9()["runs"][load][runtime]


def _pim_blocks() -> int:
    """The PIM device's KV blocks in Fig. 9's runs (its capacity in tokens over the runs'
    block size, ``HitTask.block_size``): stranded positions count blocks."""
    import dataclasses

    from patton.eval.tasks import HitTask

    size = next(f.default for f in dataclasses.fields(HitTask) if f.name == "block_size")
    return _run("pressure", "patton")["capacity_tokens"] // size


def _k(tokens: float) -> str:
    """Tokens in thousands: one decimal below 100 k."""
    return f"{tokens / 1000:.1f} k" if tokens < 100_000 else f"{tokens / 1000:.0f} k"


def _fig9_table() -> str:
    """Hit rates per load beside the paper's (bold where the paper has the load)."""
    from patton.eval.figures.fig9 import PAPER

    lines = ["| load | C / P | live context mean / max | GPU | PATTON | no-O2V | paper (GPU / "
             "PATTON / no-O2V) |", "|---|---|---|---|---|---|---|"]
    for load, label in _LOADS.items():
        gpu = _run(load, "gpu")
        hits = [f"{100 * _fig9()[load][r]:.2f} %" for r in _RUNTIMES]
        paper = ""
        if load in PAPER:
            hits = [f"**{h}**" for h in hits]
            paper = " / ".join(f"{100 * PAPER[load][r]:.2f}" for r in _RUNTIMES) + " %"
        lines.append(f"| {label} | {gpu['clients']} / {gpu['pool']} | {_k(gpu['live_mean'])} / "
                     f"{_k(gpu['live_max'])} | " + " | ".join(hits) + f" | {paper} |")
    return "\n".join(lines)


BLOCKS["serving.fig9"] = _fig9_table
NUMBERS.update({
    "serving.fig9.preemptions": lambda: str(sum(
        _run(load, r)["preemptions"] for load in _LOADS for r in _RUNTIMES)),
    "serving.fig9.stranded.patton": lambda: f"{_run('pressure', 'patton')['stranded_mean']:,.0f}",
    "serving.fig9.stranded.no_o2v": lambda: (
        f"{_run('pressure', 'patton-no-o2v')['stranded_mean']:,.0f}"),
    "serving.fig9.pim_capacity": lambda: f"{_pim_blocks():,}",
    "serving.fig9.stranded.share": lambda: "{:.0f} %".format(
        100 * _run("pressure", "patton")["stranded_mean"] / _pim_blocks()),
    "serving.fig9.collapse": lambda: f"{100 * _fig9()['pressure']['patton-no-o2v']:.1f} %",
    "serving.fig9.light_gap": lambda: "{:.1f}".format(
        100 * (_fig9()["light"]["gpu"] - _fig9()["light"]["patton-no-o2v"])),
    "serving.fig9.ceiling": lambda: "{:.0f}–{:.0f} %".format(
        *sorted(100 * _fig9()[load]["gpu"] for load in ("pressure", "light"))),
    "serving.fig9.overload.live_max": lambda: _k(_run("overload", "gpu")["live_max"]),
    "serving.fig9.pressure.live_max": lambda: _k(_run("pressure", "gpu")["live_max"]),
    "serving.fig9.pressure.gap": lambda: "{:.1f}".format(
        100 * (_fig9()["pressure"]["patton"] - _fig9()["pressure"]["gpu"])),
    "serving.fig9.normal.no_o2v": lambda: f"{100 * _fig9()['normal']['patton-no-o2v']:.1f} %",
    "serving.fig9.capacity": lambda: f"{_run('normal', 'gpu')['capacity_tokens'] / 1000:.0f} k",
})

#: Builds Fig. 9's 3,000-conversation ShareGPT file in a temporary folder and prints its
#: size: conversations, bytes, tokens, messages (a turn is a user and an assistant message).
_SHAREGPT = """
import json, pathlib, subprocess, sys, tempfile
with tempfile.TemporaryDirectory() as tmp:
    out = pathlib.Path(tmp) / "sharegpt.jsonl"
    subprocess.run([sys.executable, "-m", "patton.cli", "workload", "sharegpt", "--out",
                    str(out), "--count", "3000"], check=True, capture_output=True)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    print(json.dumps({"conversations": len(rows), "bytes": out.stat().st_size,
                      "tokens": sum(len(m) for r in rows for m in r["messages"]),
                      "messages": sum(len(r["messages"]) for r in rows)}))
"""
RECORDS: dict[str, Quick] = {"serving-sharegpt-3000": Quick(["-c", _SHAREGPT])}


def _sharegpt(key: str) -> float:
    return record("serving-sharegpt-3000")[key]


NUMBERS.update({
    "serving.sharegpt.mb": lambda: f"{_sharegpt('bytes') / 1e6:.0f} MB",
    "serving.sharegpt.tokens": lambda: f"{_sharegpt('tokens') / 1e6:.1f} M",
    "serving.sharegpt.per_conversation": lambda: (
        f"{_sharegpt('tokens') / _sharegpt('conversations'):,.0f}"),
    "serving.sharegpt.turns": lambda: (
        f"{_sharegpt('messages') / 2 / _sharegpt('conversations'):.1f}"),
})
