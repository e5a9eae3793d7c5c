"""metagen.eval: run strategies over a task, resumably, and derive their curves over N.

- :mod:`~metagen.eval.runner` — :func:`run_eval` (sample once at the largest N, score once,
  every N derived; SQLite store; resume; atomic ``results.json``).
- :mod:`~metagen.eval.config` — :class:`EvalConfig`, one evaluation's settings and run key.
- :mod:`~metagen.eval.catalog` — the strategies a run may name, read from the strategy
  registry (plus eval's own ``greedy``); :mod:`~metagen.eval.direct` runs the ones that are
  not subsampled at each N.
- :mod:`~metagen.eval.backends` — the policy, scorers and cost model items are done with.
- :mod:`~metagen.eval.item` — one item of a run (:func:`~metagen.eval.item.run_item`).
- :mod:`~metagen.eval.tasks` — the task registry (gsm8k, math500, testbed, humaneval,
  mbpp), each with a text and a chat prompt; :mod:`~metagen.eval.task_form` puts a task in a
  run's form (text or chat, answers read after a thinking block);
  :mod:`~metagen.eval.chat_template` — the default form (chat for a model with a template).
- :mod:`~metagen.eval.estimators` — subset enumeration, standard errors (pass@k is
  :func:`metagen.tasks.pass_at_k.pass_at_k`).
- :mod:`~metagen.eval.store` — the run's SQLite store.
- :mod:`~metagen.eval.cost` — per-item generated tokens and FLOPs of each strategy at each N
  (the one derivation; the report's too).
- :mod:`~metagen.eval.threads` — items in flight in threads over one thread-safe backend.
- :mod:`~metagen.eval.table`, :mod:`~metagen.eval.plot` — a run's curve as a table and a PNG.
- :mod:`~metagen.eval.demo` — ``metagen demo``: the testbed preset over the runner.
"""

from metagen.eval.estimators import mean_stderr, subsets
from metagen.eval.runner import EvalConfig, run_eval
from metagen.eval.tasks import TASKS, EvalItem, TaskSpec, get_task

__all__ = ["EvalConfig", "EvalItem", "TASKS", "TaskSpec", "get_task", "mean_stderr",
           "run_eval", "subsets"]
