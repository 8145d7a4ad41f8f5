"""Runs a plan's tasks on an executor (`experiments.executors`): every run of every ready task is
submitted at once, a task advances when its wave is back and starts when those it reads end."""

import contextlib
import dataclasses
import os
from typing import Any, Optional, Sequence

from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import plan as plan_lib
from experiments.benchmarking import runs as runs_lib


@dataclasses.dataclass
class Counts:
  """What the runs of a plan did so far, for the progress display and timing.json."""
  planned: dict[str, int]   # phase -> runs planned (tuning: an upper bound until its tasks end)
  done: dict[str, int]      # phase -> runs back (finished or failed)
  runs_done: int = 0
  runs_skipped: int = 0
  build_seconds: float = 0.0
  processes_built: int = 0
  rounds_done: int = 0
  failures: list = dataclasses.field(default_factory=list)   # (spec, message)

  @classmethod
  def of(cls, tasks: Sequence[plan_lib.Task]) -> 'Counts':
    phases = (runs_lib.TUNE_PHASE, runs_lib.REPORT_PHASE)
    return cls(planned={p: sum(t.runs for t in tasks if t.phase == p) for p in phases},
               done=dict.fromkeys(phases, 0))

  @property
  def total(self) -> int:
    return max(sum(self.done.values()), sum(self.planned.values()))

  def line(self) -> str:
    """'tune 12/40  report 3/30  1 failed'."""
    parts = [f'{phase} {self.done[phase]}/{self.planned[phase]}' for phase in self.planned
             if self.planned[phase]]
    return '  '.join(parts + ([f'{len(self.failures)} failed'] if self.failures else []))


def run(tasks: Sequence[plan_lib.Task], executor, *, root: str, counts: Counts,
        on_progress=lambda counts: None, on_failure=lambda spec, message: None,
        on_task=lambda task, result, results: None,
        before_submit=lambda spec: None) -> dict[tuple, Any]:
  """Runs `tasks` on `executor` (jobs: `RunSpec`s, answers: `engine.Ran`) keeping `counts`;
  returns task key -> result. Calls `on_task` as a task ends, `on_failure` as a run fails (a
  dead worker's too), `on_progress` after every run, `before_submit` before a run."""
  results: dict[tuple, Any] = {}
  waiting = list(tasks)
  active: dict[tuple, dict] = {}   # key -> task, generator, wave, got (directory -> summary), used
  in_flight: dict[int, tuple[str, runs_lib.RunSpec]] = {}    # ticket -> (directory, spec)
  readers: dict[str, list[tuple]] = {}                       # directory -> task keys

  def advance(key: tuple, sent: Optional[list]) -> None:
    state = active[key]
    task = state['task']
    while True:
      try:
        wave = next(state['generator']) if sent is None else state['generator'].send(sent)
      except StopIteration as stop:
        del active[key]
        results[key] = stop.value
        counts.planned[task.phase] += state['used'] - task.runs   # its bound is now exact
        on_task(task, stop.value, results)
        return
      if wave:
        break
      sent = []
    state.update(wave=list(wave), got={}, used=state['used'] + len(wave))
    for spec in wave:
      where = spec.directory(root)
      if where not in readers:
        readers[where] = []
        before_submit(spec)
        in_flight[executor.submit(spec)] = (where, spec)
      readers[where].append(key)

  def start_ready() -> None:   # until none is ready (a task may end at once, readying others)
    while ready := [t for t in waiting if all(k in results for k in t.after)]:
      for task in ready:
        waiting.remove(task)
        active[task.key] = dict(task=task, generator=task.body(results), used=0)
        advance(task.key, None)

  start_ready()
  while active or waiting:
    if not in_flight:
      raise RuntimeError('the plan cannot go on: tasks wait for tasks that never end '
                         f'{[t.key for t in waiting]}')
    for outcome in executor.wait():
      where, spec = in_flight.pop(outcome.ticket)
      ran = outcome.value
      if outcome.error is not None:   # the worker died: the run's failure, in its error.txt
        ran = engine_lib.Ran(None, outcome.error, False, 0.0, 0, 0)
        with contextlib.suppress(OSError):   # a file where the run's directory should be
          os.makedirs(where, exist_ok=True)
          with open(os.path.join(where, 'error.txt'), 'w') as f:
            f.write(f'{outcome.error}\n')
      counts.done[spec.phase] += 1
      counts.runs_done += ran.summary is not None and not ran.skipped
      counts.runs_skipped += ran.skipped
      counts.build_seconds += ran.build_seconds
      counts.processes_built += ran.processes_built
      counts.rounds_done += ran.rounds
      if ran.failure is not None:
        counts.failures.append((spec, ran.failure))
        on_failure(spec, ran.failure)
      for key in readers.pop(where):
        got, wave = active[key]['got'], active[key]['wave']
        got[where] = ran.summary
        if all(s.directory(root) in got for s in wave):
          advance(key, [got[s.directory(root)] for s in wave])
      on_progress(counts)
    start_ready()
  return results
