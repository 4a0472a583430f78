"""The serving side: the engine, its workload, and the one step driver that runs them.

The engine (``engine``: vLLM 0.33's scheduler restated; ``vllm_engine``: real vLLM) serves
conversation files (``conversations``) to the closed-loop clients (``clients``); the step
driver (``driver``) sends, schedules, hands the block events (``events``) to the runtime
through its adapter (``adapter``, sized by ``capacity``), runs the step's forward pass on the
device (``forward``, ``work``, ``kv_data``) and updates, with observers: ``meter`` (``patton
serve``, ``serve``), ``checks`` and ``faults`` (the chat, ``chat``), the random scenario
(``scenario``) and the evaluation's cost runs (:mod:`patton.eval.cost`). ``docs/serving.md``.
"""
