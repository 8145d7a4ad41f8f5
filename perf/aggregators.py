"""Round time and peak memory of the conflict aggregators inside `build_weighted_fed_avg`, against
MeanFactory's: `python -m perf.aggregators --clients=10,50,100 [--runner=inprocess] [--small]`
prints a Markdown table (`--clients=3 --small --rounds=2`: a quick check)."""

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from perf import workloads  # pylint: disable=g-import-not-at-top
from perf.memory import PeakRss  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top

FACTORIES = ('mean', 'fedgh', 'dgc', 'principal', 'corrective', 'corrective_client_mean')


def _factory(name):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  return {
      'mean': tff.aggregators.MeanFactory,
      'fedgh': lambda: aggregators.GradientHarmonizationFactory(seed=0),
      # Inside build_weighted_fed_avg the weight is a number of examples, not a loss.
      'dgc': lambda: aggregators.DominantGradientCorrectionFactory(weights_are_losses=False),
      'principal': aggregators.PrincipalGradientFactory,
  }[name]()


def _build(name, keras_fn, spec):
  """build_weighted_fed_avg with the named factory; 'corrective': its own pipeline."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  sgd = tff.learning.optimizers.build_sgdm
  if name == 'corrective':
    from tff_conflict import learning  # pylint: disable=g-import-not-at-top
    return learning.build_fed_corrective(keras_fn, input_spec=spec, client_optimizer_fn=sgd(0.05),
                                         server_optimizer_fn=sgd(1.0))
  if name == 'corrective_client_mean':
    return _corrective_client_work_with_mean(keras_fn, spec)

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_fn(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=spec)

  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=sgd(0.05), server_optimizer_fn=sgd(1.0),
      model_aggregator=_factory(name))


def _corrective_client_work_with_mean(keras_fn, spec):
  """The corrective pipeline with MeanFactory in place of CorrectiveGradientFactory.

  Same client work (training plus the extra gradient pass), so the corrective factory's own cost
  is its time and memory above this process's.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict.learning import corrective  # pylint: disable=g-import-not-at-top
  from tff_conflict.learning import models as models_lib  # pylint: disable=g-import-not-at-top
  model_fn = models_lib.build_model_fn(
      keras_fn, input_spec=spec,
      loss_fn=lambda: tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  @tff.tensorflow.computation
  def initial_weights():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_weights.type_signature.result
  client_work = corrective.build_corrective_client_work(
      model_fn, tff.learning.optimizers.build_sgdm(0.05))
  aggregation = tff.aggregators.MeanFactory().create(
      corrective.corrective_value_type(weights_type.trainable), tff.TensorType(np.float32))
  finalizer = corrective.build_update_field_finalizer(tff.learning.optimizers.build_sgdm(1.0),
                                                      weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_weights, tff.learning.templates.build_broadcast_process(weights_type), client_work,
      aggregation, finalizer)


def _run_one(name, keras_fn, data, rounds, runner_kind, threads):
  """Round times and peak memory growth (own, worker) over `initialize`'s level, sampled by PeakRss.

  In the C++ runtime the gather guard keeps its default limit; the in-process runner runs without.
  """
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  limit = None if runner_kind == 'inprocess' else aggregators.max_gather_bytes()
  with aggregators.gather_memory_limit(limit):
    process = _build(name, keras_fn, data[0].element_spec)
  if runner_kind == 'inprocess':
    from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top
    process = inprocess.InProcessRunner(process, num_threads=threads)
  state = process.initialize()
  times = []
  with PeakRss() as rss:
    for _ in range(rounds):
      start = time.perf_counter()
      out = process.next(state, data)
      times.append(time.perf_counter() - start)
      state = out.state
  return times, rss.extra_gb()


def _parser():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--clients', default='10,50,100', help='comma-separated cohort sizes')
  parser.add_argument('--rounds', type=int, default=3, help='rounds per run (first = compile)')
  parser.add_argument('--examples', type=int, default=20, help='examples per client')
  parser.add_argument('--factories', default=','.join(FACTORIES))
  parser.add_argument('--small', action='store_true', help='784-62 softmax model instead of CNN')
  parser.add_argument('--runner', choices=('cpp', 'inprocess'), default='cpp')
  parser.add_argument('--threads', type=int, default=1, help='in-process runner: clients at once')
  parser.add_argument('--repeats', type=int, default=3,
                      help='runs of every case, interleaved (mean, fedgh, ..., mean, fedgh, ...)')
  parser.add_argument('--one', default=None, help=argparse.SUPPRESS)  # "K,factory": child run
  return parser


def _keras_fn(args):
  return workloads.softmax_regression if args.small else workloads.emnist_sized_cnn


def _child(args):
  """Runs one (K, factory) case in this process; prints one JSON line."""
  k, name = args.one.split(',')
  k = int(k)
  runtime.set_local_context()
  sizes = [int(c) for c in args.clients.split(',')]
  data = workloads.random_emnist_clients(max(sizes), args.examples, args.examples)[:k]
  try:
    times, (own_gb, worker_gb) = _run_one(name, _keras_fn(args), data, args.rounds, args.runner,
                                          args.threads)
    print(json.dumps(dict(times=times, own_gb=own_gb, worker_gb=worker_gb)), flush=True)
  finally:
    runtime.shutdown_workers()


def _run_case(args, k, name):
  """One (K, factory) case in a fresh Python process (and, in the C++ runtime, a fresh worker),
  so that no case inherits memory an earlier one left with the allocator; its JSON or an error."""
  argv = [sys.executable, '-m', 'perf.aggregators', f'--one={k},{name}',
          f'--clients={args.clients}', f'--rounds={args.rounds}', f'--examples={args.examples}',
          f'--runner={args.runner}', f'--threads={args.threads}'] + (
              ['--small'] if args.small else [])
  proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                        check=False)
  lines = [l for l in proc.stdout.splitlines() if l.startswith('{')]
  if proc.returncode or not lines:
    errors = [l for l in proc.stderr.splitlines() if 'Error' in l or 'refusing' in l]
    return dict(error=f'rc {proc.returncode}: ' + (errors[-1][:300] if errors else
                                                     proc.stderr[-300:]))
  return json.loads(lines[-1])


def main():
  args = _parser().parse_args()
  if args.one:
    _child(args)
    return
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  from tff_conflict.aggregators import _gather  # pylint: disable=g-import-not-at-top

  factories = [f for f in args.factories.split(',') if f]
  for f in factories:
    if f not in FACTORIES:
      raise ValueError(f'--factories: unknown {f!r}; choose from {FACTORIES}')
  if factories[0] != 'mean':
    factories = ['mean'] + [f for f in factories if f != 'mean']
  if args.threads < 1:
    raise ValueError(f'--threads must be >= 1, got {args.threads}')
  if args.repeats < 1:
    raise ValueError(f'--repeats must be >= 1, got {args.repeats}')
  sizes = [int(c) for c in args.clients.split(',')]
  d = int(sum(np.prod(w.shape) for w in _keras_fn(args)().trainable_weights))
  limit = None if args.runner == 'inprocess' else aggregators.max_gather_bytes()
  # Bytes per gathered client row: the update in the counter's pieces and the weight concatenated;
  # the corrective factory adds the gradient (pieces) and the loss (concatenated).
  k_max = _gather.max_clients_for(4 * d, limit, small_row_bytes=4)
  k_max_corrective = _gather.max_clients_for(8 * d, limit, small_row_bytes=8)
  threads = f', {args.threads} thread(s)' if args.runner == 'inprocess' else ''
  print(f'model: {"softmax" if args.small else "CNN"}, d = {d:,} parameters; runner: '
        f'{args.runner}{threads}; gather limit: {limit} bytes (K_max = {k_max}, corrective '
        f'{k_max_corrective}); {args.rounds} '
        f'rounds; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}')
  print(f'{args.repeats} interleaved run(s) per case: first round and later rounds are medians '
        f'(later: the median over runs of each run\'s median), peaks the largest over runs.')
  print('| K | aggregator | first round s | later rounds s | ratio to mean | '
        'peak +GB python | peak +GB worker | +GB vs mean | K x d stack GB |')
  print('|---|---|---|---|---|---|---|---|---|')
  for k in sizes:
    stack_gb = k * d * 4 / 1e9
    runnable = []
    for name in factories:
      limit_k = k_max_corrective if name == 'corrective' else k_max
      if name not in ('mean', 'corrective_client_mean') and limit_k is not None and k > limit_k:
        print(f'| {k} | {name} | refused (K_max = {limit_k}) | | | | | | {stack_gb:.2f} |',
              flush=True)
      else:
        runnable.append(name)
    cases = {name: [] for name in runnable}
    for _ in range(args.repeats):  # interleaved, so slow spells of the machine hit every case
      for name in runnable:
        cases[name].append(_run_case(args, k, name))
    base_time = base_gb = None
    for name in runnable:
      runs = [c for c in cases[name] if 'error' not in c]
      if not runs:
        print(f'| {k} | {name} | failed ({cases[name][0]["error"]}) | | | | | | {stack_gb:.2f} |',
              flush=True)
        continue
      first = float(np.median([c['times'][0] for c in runs]))
      # Per run the median of its later rounds; over runs their median.
      later = float(np.median([np.median(c['times'][1:]) if len(c['times']) > 1
                               else c['times'][0] for c in runs]))
      own_gb = max(c['own_gb'] for c in runs)
      worker_gb = max(c['worker_gb'] for c in runs)
      total_gb = own_gb + worker_gb
      if name == 'mean':
        base_time, base_gb = later, total_gb
      ratio = later / base_time if base_time else float('nan')
      extra = total_gb - base_gb if base_gb is not None else float('nan')
      failed = len(cases[name]) - len(runs)
      note = f' ({failed} of {len(cases[name])} runs failed)' if failed else ''
      print(f'| {k} | {name}{note} | {first:.2f} | {later:.2f} | {ratio:.2f} | '
            f'{own_gb:.2f} | {worker_gb:.2f} | {extra:.2f} | {stack_gb:.2f} |', flush=True)


if __name__ == '__main__':
  main()
