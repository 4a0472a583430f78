"""The serving loop exists once: ``patton serve``, the chat and a cost run are one driver.

The three serve one conversation file with the same engine parameters and a PATTON runtime
that has room for every block (so no placement changes a decision); each is the step driver
(:class:`~patton.serving.driver.Driver`) with its own observers and device, and the engine's
decisions, step by step (every scheduled request with its tokens, every preemption, every
request's prefix hit and finish), are the same in all three.
"""

from __future__ import annotations

from patton.eval.cost import measure
from patton.runtime.models import MODELS
from patton.serving.chat import DEMO_CONVERSATIONS, Chat, ChatSetup
from patton.serving.conversations import read
from patton.serving.driver import Driver
from patton.serving.serve import serve
from patton.sim.executor import CycleExecutor

CONVERSATIONS = read(DEMO_CONVERSATIONS)
#: The workload and the engine of all three (the cost runs' block count: the 16 GiB device).
CLIENTS, POOL, BATCHED, LENGTH = 4, 4, 2048, 2048


class Drivers:
    """Remembers the driver it observes."""

    def __init__(self) -> None:
        self.drivers: list[Driver] = []

    def start(self, driver: Driver) -> None:
        self.drivers.append(driver)


def test_serve_the_chat_and_a_cost_run_make_the_same_decisions_on_one_driver() -> None:
    served = serve(CONVERSATIONS, "patton", MODELS["llama3-8b"], clients=CLIENTS, pool=POOL,
                   max_batched_tokens=BATCHED, max_model_len=LENGTH)
    params = served.params
    seen = Drivers()
    measure(CONVERSATIONS, "llama3-8b", "patton", steps=10_000, clients=CLIENTS, pool=POOL,
            max_model_len=LENGTH, max_batched_tokens=BATCHED, observers=[seen])
    (costed,) = seen.drivers
    setup = ChatSetup(layers=1, layer_rows=64, num_blocks=params.num_blocks, clients=CLIENTS,
                      pool=POOL, max_num_seqs=CLIENTS, max_num_batched_tokens=BATCHED,
                      max_model_len=LENGTH)
    chat = Chat(CONVERSATIONS, CycleExecutor(setup.config().device), setup)
    report = chat.run()

    assert isinstance(costed, Driver) and isinstance(chat.driver, Driver)
    assert costed.params == params == chat.driver.params
    runs = [served.run.as_dict(), costed.run_record.as_dict(), chat.driver.run_record.as_dict()]
    assert runs[0]["complete"] and runs[0]["report"]["cached_tokens"] > 0  # prefix hits
    assert len(runs[0]["steps"]) > 50
    assert runs[1] == runs[0] and runs[2] == runs[0]
    # no placement changed a decision: the runtimes never refused a block
    assert served.attached.refused == costed.attached.refused == chat.attached.refused == 0
    assert report.failures == [] and report.steps[-1].checks == 1  # the chat checked it all
