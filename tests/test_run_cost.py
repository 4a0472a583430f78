"""The cost of a serving run (``eval/cost.py``, ``docs/run-cost.md``).

The central test (:func:`test_one_layer_times_layers_is_exact`) drives a runtime laid out
for 2-4 layers (the real per-layer row budget) layer by layer, every query head of the GQA
group issued, on a plain cycle model, and requires :func:`measure`'s one-layer figures with
its shortcuts (foreign rows, fixpoints, cost reuse) to be the same cycles and energy.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from patton.eval import cost as run_cost
from patton.eval.cost import PART_OF, PARTS, measure, reference
from patton.runtime.baselines import BASELINES, Geometry
from patton.runtime.models import MODELS
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import variant as runtime_variant
from patton.serving import capacity
from patton.serving.adapter import Attached
from patton.serving.chat import DEMO_CONVERSATIONS
from patton.serving.conversations import read
from patton.serving.driver import Driver
from patton.serving.engine import EmbeddedEngine
from patton.serving.forward import PARTS as BATCHING
from patton.serving.interface import EngineParams
from patton.serving.kv_data import Pattern
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE
from patton.sim.energy import COMPONENTS, energy
from patton.sim.executor import closed
from patton.sim.timing import DEFAULT_PROFILE, PROFILES

from patton.cli import main

DEMO = read(DEMO_CONVERSATIONS)  # 8 short conversations, 2-3 turns each
SMALL = {"clients": 4, "pool": 8}


@pytest.fixture(scope="module")
def served():
    """PATTON serving the demo conversations to the end on the default 16 GiB device."""
    ref = reference(DEMO, "llama3-8b", steps=200, **SMALL)
    return ref, measure(DEMO, "llama3-8b", "patton", steps=200, reference=ref, **SMALL)


# ------------------------------------------------------------------------------ figures


def test_parts_are_nonzero_with_decode_steps(served):
    _, rc = served
    assert rc.steps < 200 and rc.decode_tokens > 0 and rc.prefill_tokens > 0
    for name in PARTS:
        assert rc.parts[name].cycles > 0 and rc.parts[name].energy_pj > 0, name
    assert rc.pim_seconds == pytest.approx(sum(p.seconds for p in rc.parts.values()))
    assert rc.latency_seconds == rc.pim_seconds + rc.recompute_seconds
    assert rc.energy_joules == pytest.approx(rc.pim_joules + rc.recompute_joules)
    d = json.loads(json.dumps(rc.as_dict()))
    assert set(d["parts"]) == set(PARTS)
    assert set(d["parts"]["qk"]) == {"cycles", "energy_pj", "seconds", "joules",
                                     "energy_components_joules"}
    for name in PARTS:  # the components split each part's energy
        split = d["parts"][name]["energy_components_joules"]
        assert tuple(split) == COMPONENTS and min(split.values()) >= 0.0
        assert split["act"] > 0 and split["standby"] > 0, name
        assert sum(split.values()) == pytest.approx(d["parts"][name]["joules"], rel=1e-12)
    assert d["runtime"] == "patton" and d["checked_programs"] == 0


def test_no_recompute_without_preemption_on_ample_memory(served):
    ref, rc = served
    assert rc.preemptions == 0 and rc.hit_rate > 0.3 and rc.unreferenced == 0
    assert rc.recompute_seconds == 0.0 and rc.recompute_joules == 0.0
    assert rc.recomputed_tokens == 0
    assert ref.steps_run >= rc.steps and len(ref.required) > 0


def test_a_run_of_only_prefill_has_no_attention():
    rc = measure(DEMO, "llama3-8b", "patton", steps=1, **SMALL)
    assert rc.decode_tokens == 0 and rc.prefill_tokens > 0
    assert rc.parts["qk"].cycles == rc.parts["sv"].cycles == 0
    assert rc.parts["qk"].energy_pj == rc.parts["sv"].energy_pj == 0.0
    assert rc.parts["k_write"].cycles > 0 and rc.parts["v_write"].cycles > 0


def test_recompute_when_memory_is_tight():
    rc = measure(DEMO, "llama3-8b", "patton", steps=200, num_blocks=128, **SMALL)
    assert rc.recomputed_tokens > 0
    assert rc.recompute_seconds > 0 and rc.recompute_joules > 0
    # a step's recomputation is priced whole minus required, so it is at most the whole
    model = run_cost.gpu_cost.AnalyticCost(MODELS["llama3-8b"])
    assert rc.recompute_seconds < model.step([(rc.prefill_tokens, 0)]).seconds


def test_prefix_caching_off_gives_no_hits(monkeypatch):
    monkeypatch.setattr(capacity, "REQUIREMENTS",
                        {"patton": capacity.Requirements("patton", 16, False, None)})
    rc = measure(DEMO, "llama3-8b", "patton", steps=200, **SMALL)
    assert rc.hit_rate == 0.0 and rc.recomputed_tokens > 0 and rc.recompute_seconds > 0


def test_profile_context_limit(monkeypatch):
    monkeypatch.setattr(capacity, "REQUIREMENTS",
                        {"patton": capacity.Requirements("patton", 16, True, 1024)})
    with pytest.raises(ValueError, match="at most 1024 tokens"):
        measure(DEMO, "llama3-8b", "patton", steps=2, **SMALL)
    assert measure(DEMO, "llama3-8b", "patton", steps=2, max_model_len=1024, **SMALL).steps == 2


# ------------------------------------------------------------------------------ errors


def test_gpu_variant_is_rejected():
    with pytest.raises(ValueError, match="'gpu' is vLLM's own KV cache: it has no PIM"):
        measure(DEMO, "llama3-8b", "gpu", steps=2, **SMALL)


@pytest.mark.parametrize("kwargs, message", [
    ({"model": "llama-9000"}, "unknown model 'llama-9000'"),
    ({"runtime": "nope"}, "unknown runtime 'nope'"),
    ({"frontend": "sideways"}, "unknown front end 'sideways'"),
    ({"pool": 6}, "pool must be a positive multiple of clients"),
    ({"steps": -1}, "steps must be >= 0"),
    ({"clients": 0}, "clients must be >= 1"),
    ({"num_blocks": 1}, "num_blocks must be None or an int >= 2"),
])
def test_bad_arguments(kwargs, message):
    args = dict(model="llama3-8b", runtime="patton", steps=2, **SMALL)
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        measure(DEMO, args.pop("model"), args.pop("runtime"), **args)


def test_a_reference_of_another_workload_is_rejected():
    ref = reference(DEMO, "llama3-8b", steps=5, clients=4, pool=4)
    with pytest.raises(ValueError, match="the reference was run with"):
        measure(DEMO, "llama3-8b", "patton", steps=5, reference=ref, **SMALL)


def _plain(cost: run_cost.RunCost) -> dict:
    """A cost's figures without its wall times (which differ run to run)."""
    d = cost.as_dict()
    d.pop("wall_seconds")
    d.pop("seconds_by_phase")
    return d


@pytest.mark.parametrize("runtime", ["patton", "blockpim", "neupims"])
def test_one_run_for_twin_models_and_both_front_ends_equals_separate_runs(monkeypatch, runtime):
    """OPT-6.7B and Qwen1.5-7B (one attention shape) on both front ends in one run: every
    (model, front end) cost is the separate run's, field for field; the twins' GPU pricing
    differs, their PIM parts do not."""
    plain = _plain
    args = dict(steps=60, max_model_len=1024, **SMALL)
    models, frontends = ("opt-6.7b", "qwen1.5-7b"), ("shared", "per_channel")
    monkeypatch.setattr(run_cost, "_CACHES", {})
    together = run_cost.measure_many(DEMO, models, runtime, frontends=frontends, **args)
    assert sorted(together) == sorted((m, f, DEFAULT_PROFILE, "analytic", "per_channel")
                                      for m in models for f in frontends)
    for (m, f, *_), rc in together.items():
        monkeypatch.setattr(run_cost, "_CACHES", {})  # a fresh process's caches
        assert plain(rc) == plain(measure(DEMO, m, runtime, frontend=f, **args)), (m, f)
    for f in frontends:
        a, b = together[run_cost.CostKey("opt-6.7b", f)], \
            together[run_cost.CostKey("qwen1.5-7b", f)]
        assert a.parts == b.parts and a.recomputed_tokens == b.recomputed_tokens
    opt, qwen = (together[run_cost.CostKey(m, "shared")] for m in models)
    if opt.recomputed_tokens:
        assert opt.recompute_joules != qwen.recompute_joules


def test_one_run_prices_every_timing_gpu_model_and_standby_as_separate_runs(monkeypatch):
    """Timing profiles, GPU models and standby accountings of one run: each view is the
    separate run's; ``cent`` standby is ``per_channel``'s over the channels, exactly."""
    plain = _plain
    args = dict(steps=40, max_model_len=1024, **SMALL)
    timings, gpus, standbys = PROFILES, ("analytic", "calibrated"), ("per_channel", "cent")
    monkeypatch.setattr(run_cost, "_CACHES", {})
    views = run_cost.measure_many(DEMO, ["llama3-8b"], "patton", frontends=["shared"],
                                  timings=timings, gpus=gpus, standbys=standbys, **args)
    assert len(views) == 2 * 2 * 2
    for key, rc in views.items():
        monkeypatch.setattr(run_cost, "_CACHES", {})
        alone = measure(DEMO, key.model, "patton", frontend=key.frontend, timing=key.timing,
                        gpu=key.gpu, standby=key.standby, **args)
        assert plain(rc) == plain(alone), key
    for t in timings:
        per, cent = (views[run_cost.CostKey("llama3-8b", "shared", t, "analytic", s)]
                     for s in standbys)
        assert per.parts["qk"].cycles == cent.parts["qk"].cycles
        for p in run_cost.PARTS:
            a, b = per.parts[p].as_dict(), cent.parts[p].as_dict()
            sa, sb = (x["energy_components_joules"]["standby"] for x in (a, b))
            assert sa > 0 and sb == pytest.approx(sa / 32, rel=1e-12)
            assert a["joules"] - b["joules"] == pytest.approx(sa - sb, rel=1e-9)
    cycles = {t: sum(p.cycles for p in views[run_cost.CostKey("llama3-8b", "shared",
                                                                t)].parts.values())
              for t in timings}
    assert len(set(cycles.values())) == 2  # the profiles time the same programs differently
    a, c = (views[run_cost.CostKey("llama3-8b", "shared", DEFAULT_PROFILE, g)]
            for g in gpus)
    assert a.parts == c.parts and a.recomputed_tokens == c.recomputed_tokens
    if a.recomputed_tokens:
        assert a.recompute_seconds != c.recompute_seconds


def test_wo_cz_write_command_is_a_choice_and_checked():
    """PATTON-wo-CZ's single-token Value write by per-bank W MEM or by WR_ABK: the same
    engine run (the other parts equal), every program verified and attention bit-exact."""
    args = dict(steps=24, max_model_len=1024, **SMALL)
    mem, abk = (measure(DEMO, "llama3-8b", "patton-wo-cz", token_op=op, replay=True, **args)
                for op in ("mem", "abk"))
    for rc in (mem, abk):
        assert rc.checked_programs > 0 and rc.violations == 0 and rc.mismatches == 0
    assert (mem.decode_tokens, mem.prefill_tokens, mem.hit_rate) == \
        (abk.decode_tokens, abk.prefill_tokens, abk.hit_rate)  # one engine run
    assert mem.decode_tokens > 0
    assert mem.parts["v_write"].cycles > abk.parts["v_write"].cycles  # W MEM: per bank
    assert measure(DEMO, "llama3-8b", "patton-wo-cz", **args).parts["v_write"].cycles == \
        abk.parts["v_write"].cycles  # WR_ABK is the variant's own default


@pytest.mark.parametrize("models, frontends, kwargs, message", [
    (("llama3-8b", "opt-6.7b"), ("shared",), {}, "different attention shapes"),
    (("opt-6.7b", "opt-6.7b"), ("shared",), {}, "named twice"),
    (("opt-6.7b",), ("shared", "shared"), {}, "named twice"),
    (("opt-6.7b",), (), {}, "at least one model and one front end"),
    (("opt-6.7b", "qwen1.5-7b"), ("shared",), {"check": True}, "one model on one front end"),
    (("opt-6.7b",), ("shared",), {"timings": ("aimsim-x",)}, "unknown timing profile"),
    (("opt-6.7b",), ("shared",), {"gpus": ("h100",)}, "unknown GPU model"),
    (("opt-6.7b",), ("shared",), {"standbys": ("cent", "cent")}, "once each"),
    (("opt-6.7b",), ("shared",), {"token_op": "mem"}, "token_op applies"),
])
def test_bad_runs_of_several(models, frontends, kwargs, message):
    with pytest.raises(ValueError, match=message):
        run_cost.measure_many(DEMO, models, "patton", frontends=frontends, steps=2,
                              max_model_len=1024, **SMALL, **kwargs)


# ------------------------------------------------------------------------------ exactness


def _swap(state: DeviceState, band: int, layer: int) -> DeviceState:
    """``state`` with the rows of layer 0's band and of ``layer``'s band exchanged."""
    lo, hi = layer * band, (layer + 1) * band

    def move(r: int) -> int:
        if 0 <= r < band:
            return r + lo
        if lo <= r < hi:
            return r - lo
        return r

    return DeviceState(tuple(tuple(move(r) for r in bank) for bank in state.open_rows),
                       state.reg_mode, state.cfr)


class _Layers:
    """The step driver's observer that costs an N-layer runtime's every program explicitly.

    Per step it splits the write programs by layer band and takes each layer's QK^T and SV,
    every query head issued; at every ``sample``-th step each layer's chain, from the step's
    start state with the layer's band and layer 0's exchanged, must cost what layer 0's costs
    from the start state.
    """

    def __init__(self, layers: int, band: int, group: int, sample: int) -> None:
        self.layers, self.band, self.group, self.sample = layers, band, group, sample
        self.cm = CycleModel(DEVICE, record=False, drain=True)
        self.totals = {name: [0, 0.0, np.zeros(len(COMPONENTS))] for name in PARTS}
        self.state = DeviceState.reset(DEVICE)
        self.compared = 0
        self.decode = 0
        self.writes: list = []
        self.attention: list = []

    def _cost(self, prog, state):
        r = self.cm.run(prog, state)
        e = energy(r.command_counts, r.bank_state_cycles, r.cycles)
        return r.cycles, e.total * 1e3, r.state, np.array(list(e.components.values())) * 1e3

    def scheduled(self, work) -> None:
        self.writes, self.attention = [], []
        self.decode += len(work.decode)

    def ran(self, work, phase, prog, result) -> None:
        (self.attention if phase in ("qk", "sv") else self.writes).append((PART_OF[phase], prog))

    def stepped(self, work, out) -> None:
        band, layers = self.band, self.layers
        chains = []
        for layer in range(layers):
            chain = []
            for part, prog in self.writes:
                body = prog[:-1]  # without its EOC
                assert (body.row >= 0).all()
                mine = np.flatnonzero(body.row // band == layer)
                if len(mine):
                    chain.append((part, closed(body.take(mine)), 1))
            chain += [(part, prog, self.group) for part, prog in
                      self.attention[2 * layer:2 * layer + 2]]
            chains.append(chain)
        if work.index % self.sample == 0:
            for layer in range(1, layers):
                s0, sl = self.state, _swap(self.state, band, layer)
                for (p0, prog0, _), (pl, progl, _) in zip(chains[0], chains[layer],
                                                         strict=True):
                    a, b = self._cost(prog0, s0), self._cost(progl, sl)
                    assert p0 == pl and a[:2] == b[:2], (work.index, layer, p0)
                    assert b[2] == _swap(a[2], band, layer)
                    s0, sl = a[2], b[2]
                    self.compared += 1
        for chain in chains:
            for part, prog, repeats in chain:
                for _ in range(repeats):
                    cycles, pj, self.state, split = self._cost(prog, self.state)
                    self.totals[part][0] += cycles
                    self.totals[part][1] += pj
                    self.totals[part][2] += split


def _explicit(variant: str, layers: int, steps: int, sample: int):
    """Serve DEMO on a runtime of ``layers`` layers, every layer and query head issued
    (:class:`_Layers`); return the totals by part and the (step, layer, program) comparisons."""
    model = MODELS["llama3-8b"]
    cap = capacity.capacity(variant, model)
    band = cap.layer_rows
    if variant in BASELINES:
        b = BASELINES[variant]
        rt = b.runtime(Geometry(model, block_size=b.block_size, layers=layers,
                                layer_rows=band))
    else:
        rt = runtime_variant(variant).runtime(Config(model, layers=layers, layer_rows=band))
    params = EngineParams(cap.block_size, cap.num_blocks, SMALL["clients"], 2048, 2048,
                          enable_prefix_caching=capacity.REQUIREMENTS[variant].prefix_caching)
    observer = _Layers(layers, band, model.q_heads // model.kv_heads, sample)
    Driver(EmbeddedEngine, params, DEMO, clients=SMALL["clients"], pool=SMALL["pool"],
           attached=Attached(cap, rt, fill=False), observers=[observer],
           data=Pattern(rt.config), batching=BATCHING, max_steps=steps).run()
    assert observer.decode > 0
    return observer.totals, observer.compared


@pytest.mark.parametrize("variant, layers", [("patton", 2), ("patton", 3), ("patton", 4),
                                             ("patton-wo-cz", 3), ("patton-no-o2v", 2),
                                             ("neupims", 2),
                                             ("attacc", 2), ("blockpim", 3), ("pimphony", 2)])
def test_one_layer_times_layers_is_exact(variant, layers):
    steps = 20
    totals, compared = _explicit(variant, layers, steps, sample=4)
    assert compared > 0
    rc = measure(DEMO, "llama3-8b", variant, steps=steps, layers=layers, **SMALL)
    assert rc.decode_tokens > 0
    for name in PARTS:
        assert rc.parts[name].cycles == totals[name][0], name
        assert rc.parts[name].energy_pj == pytest.approx(totals[name][1], rel=1e-12), name
        assert rc.parts[name].components_pj == pytest.approx(totals[name][2], rel=1e-12), name


@pytest.mark.parametrize("runtime", ["patton", "blockpim"])
def test_a_later_run_reuses_the_process_costs_exactly(monkeypatch, runtime):
    """Qwen3-8B after Llama-3-8B (one attention shape, one workload): the second run finds
    its programs' costs in the process's cache and its figures are those of a fresh run."""
    def run(model):
        misses = sum(c.misses for c in run_cost._CACHES.values())
        rc = measure(DEMO, model, runtime, steps=40, **SMALL)
        d = rc.as_dict()
        for timing in ("wall_seconds", "seconds_by_phase"):
            d.pop(timing)
        return d, sum(c.misses for c in run_cost._CACHES.values()) - misses

    monkeypatch.setattr(run_cost, "_CACHES", {})
    alone, fresh = run("qwen3-8b")
    monkeypatch.setattr(run_cost, "_CACHES", {})
    first, _ = run("llama3-8b")
    after, reused = run("qwen3-8b")
    assert after == alone and first != alone  # 36 layers against 32: other figures
    assert fresh > 50 and reused < fresh / 10


# ------------------------------------------------------------------------------ checks


@pytest.mark.parametrize("variant", [v for v in capacity.RUNTIMES if v != "gpu"])
def test_replayed_run_is_bit_exact_verified_and_costs_the_same(variant):
    """Every runtime's programs of a serving run: verified, replayed on the functional model
    with attention bit-exact, and costed as an unchecked run costs them."""
    args = {"steps": 8, "clients": 2, "pool": 4}  # replay costs ~1 s a step here
    checked = measure(DEMO, "llama3-8b", variant, replay=True, **args)
    plain = measure(DEMO, "llama3-8b", variant, **args)
    assert checked.checked_programs > 0 and checked.decode_tokens > 0
    assert checked.violations == 0 and checked.mismatches == 0
    assert plain.checked_programs == 0
    for name in PARTS:  # data-independent timing, exact cost reuse
        assert checked.parts[name] == plain.parts[name], name


def test_on_step_and_entry_point(capsys):
    seen = []
    rc = measure(DEMO, "llama3-8b", "patton", steps=6, on_step=seen.append, **SMALL)
    assert seen == list(range(6)) == list(range(rc.steps))
    assert main(["cost", "--conversations", str(DEMO_CONVERSATIONS), "--steps", "4",
                           "--clients", "2", "--pool", "2"]) == 0
    out = capsys.readouterr().out
    assert "llama3-8b patton (shared front end): 4 steps" in out and "ms/step" in out
    assert main(["cost", "--conversations", str(DEMO_CONVERSATIONS), "--steps", "4",
                           "--runtime", "gpu"]) == 2
    assert "error: runtime 'gpu'" in capsys.readouterr().err
    # the assumptions on the command line: the same run, priced as asked
    argv = ["cost", "--conversations", str(DEMO_CONVERSATIONS), "--steps", "6", "--clients",
            "2", "--pool", "2", "--runtime", "patton-wo-cz", "--json"]
    assert main(argv) == 0
    base = json.loads(capsys.readouterr().out)
    assert main([*argv, "--timing", "aimsim-2eb1ee0", "--gpu", "calibrated", "--standby",
                 "cent", "--wo-cz-write", "mem"]) == 0
    other = json.loads(capsys.readouterr().out)
    assert (base["timing"], base["gpu"], base["standby"]) == ("aimsim-0f28a07", "analytic",
                                                              "per_channel")
    assert (other["timing"], other["gpu"], other["standby"]) == ("aimsim-2eb1ee0",
                                                                 "calibrated", "cent")
    assert other["decode_tokens"] == base["decode_tokens"]
    assert other["parts"]["v_write"]["cycles"] > base["parts"]["v_write"]["cycles"]
    assert main(["cost", "--runtime", "patton", "--wo-cz-write", "mem", "--steps", "2",
                 "--conversations", str(DEMO_CONVERSATIONS)]) == 2
    assert "token_op applies" in capsys.readouterr().err
