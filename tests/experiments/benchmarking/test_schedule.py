"""The plan as a value (`Plan.tasks`) run by `schedule.run`: the same choices and reporting runs as
the one-at-a-time tuning (each search driven alone, then the baseline's widening), the runs of
independent searches in flight together, reporting after every choice, and failures counted and
named."""

import hashlib

import pytest

from experiments import config as experiment_config
from experiments import executors
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import engine as engine_lib
from experiments.benchmarking import plan
from experiments.benchmarking import runs as runs_lib
from experiments.benchmarking import schedule
from experiments.benchmarking import search


def _config(root, **changes):
  args = dict(regimes=('digits:iid@6', 'digits:#C=2@6'),
              methods=('fedavg', 'fedprox', 'fedgh', 'fedavg_uniform'), epochs=(1, 2),
              report_seeds=(0, 1), tuning_seeds=(7, 8), client_lr_grid=(0.05, 0.2),
              server_lr_grid=(1.0, 3.0), tune_server_lr=True, edge_steps=2,
              loop=experiment_config.LoopConfig(rounds=9, clients_per_round=3),
              output=experiment_config.OutputConfig(output_dir=str(root), progress=False))
  args.update(changes)
  return config_lib.BenchmarkConfig(**args)


def _accuracy(spec) -> float:
  """A made-up validation or test accuracy, fixed by the run's settings."""
  key = f'{spec.phase}|{spec.regime}|{spec.epochs}|{spec.method}|{spec.kwargs}|{spec.client_lr}|' \
        f'{spec.server_lr}|{spec.seed}|{spec.rounds}'
  return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 16 ** 8


def _run(fail, spec):
  """A fake engine: a summary of `_accuracy`, or a failure for the runs `fail` picks."""
  if fail(spec):
    return engine_lib.Ran(None, 'RuntimeError: made to fail', False, 0.0, 0, 0)
  return engine_lib.Ran({'last_k_accuracy': _accuracy(spec), 'diverged': False}, None, False,
                        0.0, 0, spec.rounds)


class _Recording(executors.InlineExecutor):
  """The inline executor, recording how many runs were in flight at once and their order."""

  def __init__(self, fail=lambda spec: False):
    super().__init__(fail, _run)
    self.most_in_flight, self.order = 0, []

  def submit(self, job):
    ticket = super().submit(job)
    self.most_in_flight = max(self.most_in_flight, self.pending)
    return ticket

  def wait(self):
    self.order.append(self._queue[0][1])
    return super().wait()


def _drive(generator, evaluate):
  """Runs a search generator to its end, each (candidate, rounds) request answered by
  `evaluate(candidate, rounds)`."""
  try:
    requests = next(generator)
    while True:
      requests = generator.send([evaluate(c, rounds) for c, rounds in requests])
  except StopIteration as e:
    return e.value


def _sequential(made):
  """Choices and reporting runs as the benchmark made them one run at a time before the plan
  was a value: each method's search, then the baseline's widening."""
  choices, evaluators = [], {}
  for tuned, epochs, method in made.tuning:
    def evaluate(candidate, rounds=None, tuned=tuned, epochs=epochs, method=method):
      return search.score([_run(lambda s: False, plan.tuning_spec(
          made, tuned, epochs, method, candidate, seed, rounds)).summary
                           for seed in made.tuning_seeds])
    choices.append(_drive(search.search(
        made.search[made.dataset_of(tuned), method.name], method,
        dataset=made.dataset_of(tuned), regime=tuned, epochs=epochs), evaluate))
    evaluators[(tuned, epochs, method.name)] = evaluate
  for i, c in enumerate(choices):
    if c['method'] == made.baseline and len(c['server_lrs_tried']) > 1:
      reached = {lr for other in choices if (other['regime'], other['epochs'])
                 == (c['regime'], c['epochs']) for lr in other['server_lrs_tried']}
      choices[i] = _drive(search.widen_search(c, sorted(reached)),
                          evaluators[(c['regime'], c['epochs'], c['method'])])
  return choices, plan.report_specs(made, choices)


@pytest.mark.parametrize('changes', [{}, dict(schedule='halving'), dict(strategy='product'),
                                     dict(tune=False)])
def test_the_plan_chooses_and_reports_as_the_sequential_benchmark(tmp_path, changes):
  config = _config(tmp_path, **changes)
  made = plan.make(config)
  tasks = made.tasks
  executor = _Recording()
  counts = schedule.Counts.of(tasks)
  results = schedule.run(tasks, executor, root=config.root, counts=counts)
  choices, specs = _sequential(made)
  assert [results[plan.choice_key(made, d, e, m.name)] for d, e, m in made.tuning] == choices
  reported = [spec for task in tasks if task.phase == runs_lib.REPORT_PHASE
              for spec, _ in results[task.key]]
  assert reported == specs
  assert all(summary['last_k_accuracy'] == _accuracy(spec) for task in tasks
             if task.phase == runs_lib.REPORT_PHASE for spec, summary in results[task.key])
  if config.tune:   # every method's first wave at once: all candidates of all methods
    first = sum(len(search.candidates(made.search[made.dataset_of(r), m.name], m))
                for r, _, m in made.tuning)
    assert executor.most_in_flight >= first * len(config.tuning_seeds)
    phases = [spec.phase for spec in executor.order]
    assert runs_lib.TUNE_PHASE not in phases[phases.index(runs_lib.REPORT_PHASE):]
  assert counts.done == {runs_lib.TUNE_PHASE: len(executor.order) - len(specs),
                         runs_lib.REPORT_PHASE: len(specs)}
  assert counts.planned[runs_lib.TUNE_PHASE] == counts.done[runs_lib.TUNE_PHASE]   # exact at the end
  assert counts.planned[runs_lib.REPORT_PHASE] == made.description['runs'][runs_lib.REPORT_PHASE]


def test_a_failed_run_is_counted_named_and_the_rest_goes_on(tmp_path):
  config = _config(tmp_path)
  failing = lambda spec: spec.phase == runs_lib.REPORT_PHASE and spec.method == 'fedgh' \
      and spec.seed == 1
  made = plan.make(config)
  tasks = made.tasks
  counts, failed = schedule.Counts.of(tasks), []
  results = schedule.run(tasks, _Recording(failing), root=config.root, counts=counts,
                         on_failure=lambda spec, message: failed.append((spec.label(), message)))
  assert len(failed) == len(counts.failures) == 4   # 2 regimes x 2 E
  assert all('fedgh seed 1' in label and 'made to fail' in m for label, m in failed)
  report = [summary for task in tasks if task.phase == runs_lib.REPORT_PHASE
            for _, summary in results[task.key]]
  assert sum(s is None for s in report) == 4 and len(report) == made.description['runs'][
      runs_lib.REPORT_PHASE]
  assert 'report' in counts.line() and '4 failed' in counts.line()


def test_a_tuning_run_that_fails_leaves_its_search_incomplete_and_no_reporting_run_starts(
    tmp_path):
  # Before, the search chose among the rest (the failed candidate scored NaN).
  config = _config(tmp_path, methods=('fedavg',), epochs=(1,), tune_server_lr=False,
                   edge_steps=0)
  fails = lambda spec: spec.phase == runs_lib.TUNE_PHASE and spec.client_lr == 0.2
  made = plan.make(config)
  executor = _Recording(fails)
  results = schedule.run(made.tasks, executor, root=config.root,
                         counts=schedule.Counts.of(made.tasks))
  choice = results[plan.choice_key(made, made.tuning[0][0], 1, 'fedavg')]
  assert plan.is_incomplete(choice) and 'client_lr' not in choice
  assert all(results[t.key] is None for t in made.tasks if t.phase == runs_lib.REPORT_PHASE)


def test_another_methods_incomplete_search_holds_its_reports_and_the_baselines_widening(
    tmp_path):
  # fedgh's failed candidate: no fedgh choice; the baseline's widening to the server lrs every
  # search reached waits for it (so every report does); without server lr tuning, no widening:
  # only fedgh's reports wait.
  fails = lambda spec: spec.phase == runs_lib.TUNE_PHASE and spec.method == 'fedgh'
  for tune_server_lr, held in ((True, {'fedavg', 'fedgh'}), (False, {'fedgh'})):
    made = plan.make(_config(tmp_path, methods=('fedavg', 'fedgh'), epochs=(1,),
                             tune_server_lr=tune_server_lr))
    results = schedule.run(made.tasks, _Recording(fails), root=str(tmp_path),
                           counts=schedule.Counts.of(made.tasks))
    assert {name for name in ('fedavg', 'fedgh') if plan.is_incomplete(
        results[plan.choice_key(made, made.tuning[0][0], 1, name)])} == held
    reported = {t.key[2] for t in made.tasks if t.phase == runs_lib.REPORT_PHASE
                and results[t.key] is not None}
    assert reported == {'fedavg', 'fedgh'} - held
