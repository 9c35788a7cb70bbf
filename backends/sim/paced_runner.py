"""PacedRunner: a simulated runner in real time that keeps the simulated GPU's pace.

A runner that sleeps its predicted time from the start of each ``execute`` adds every host cost outside
it to every step: ``schedule()``, ``update_from_output()``, detokenizing, building TokenChunks, the GIL
shared with the other agents of the process, and ``sleep`` overshooting on a loaded host. Measured on the
twin fleet (2 shared cores), that made real-time TPOT 2-10% longer than the DES's, whose steps take
exactly the prediction. ``PacedRunner`` sleeps until a deadline instead: back-to-back steps end at
``previous deadline + predicted step``, so host time up to ``max_catch_up_s`` between them is absorbed
(as a GPU hides the host's scheduling behind the kernels of the step before); a step after a longer gap
(the node was idle) starts its clock at the call.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from backends.sim.runner import SimModelRunner
from engine.batch import RunnerOutput, SchedulerOutput

DEFAULT_MAX_CATCH_UP_S = 0.01  # host time between back-to-back steps that pacing absorbs


class PacedRunner:
    """Wraps a SimModelRunner (which only predicts) and sleeps to keep its pace in real time (see the module
    docstring); ``max_catch_up_s=0`` sleeps each step's predicted time from the start of its call.
    Everything but ``execute`` is the wrapped runner's."""

    def __init__(
        self,
        runner: SimModelRunner,
        max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.runner = runner
        self.max_catch_up_s = max_catch_up_s
        self._sleep = sleep
        self._monotonic = monotonic
        self._deadline_s: float | None = None  # when the previous step ends on the simulated GPU
        self.num_paced_steps = 0  # steps that started at the previous deadline (host time absorbed)

    def __getattr__(self, name: str):
        return getattr(self.runner, name)

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        now_s = self._monotonic()
        out = self.runner.execute(batch)
        start_s = now_s
        if self._deadline_s is not None and now_s - self._deadline_s <= self.max_catch_up_s:
            start_s = min(now_s, self._deadline_s)
            self.num_paced_steps += 1
        self._deadline_s = start_s + out.step_time_s
        left_s = self._deadline_s - self._monotonic()
        if left_s > 0:
            self._sleep(left_s)
        return out
