"""Conflict aggregators inside `build_weighted_fed_avg`: round time and peak memory vs MeanFactory.

    .venv/bin/python -m benchmarks.aggregators                          # 10, 50, 100 clients, CNN
    .venv/bin/python -m benchmarks.aggregators --clients=3 --small --rounds=2   # quick check
    .venv/bin/python -m benchmarks.aggregators --runner=inprocess --clients=100

Same learning process (TFF's `build_weighted_fed_avg`, SGD client lr 0.05, server lr 1), same
synthetic client data (`--examples` 28x28 images per client, one batch) and same model for every
aggregator: an EMNIST-sized CNN (conv32-conv64-maxpool-dense128-dense62, 1,206,590 parameters) or,
with `--small`, a 784-62 softmax model. Per cohort size and aggregator it reports the first round
(compilation included), the mean of the later rounds, their ratio to MeanFactory's, and the peak
resident memory of this process and of TFF's `worker_binary` above their level before the round
(sampled every 20 ms), next to one K x d float32 stack.

Runners: `cpp` (TFF's C++ runtime, the default). There the gather's memory guard refuses rounds
above `gather.max_gather_bytes()` (see `tff_conflict.aggregators.gather`); such a round is
reported as `refused` with the guard's K_max. `inprocess`: `tff_conflict.inprocess.InProcessRunner`
(MapReduceForm graphs run in this process), with the guard disabled (that runner frees
intermediate accumulators). The corrective factory needs its own client work and is not a drop-in
`model_aggregator`; it is left out here.

Prints a Markdown table. The machine running it may be shared: compare ratios within one run.
"""

import argparse
import os
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import psutil  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from benchmarks import models  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top

FACTORIES = ('mean', 'fedgh', 'dgc', 'principal')


def _factory(name):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  return {
      'mean': tff.aggregators.MeanFactory,
      'fedgh': lambda: aggregators.GradientHarmonizationFactory(seed=0),
      'dgc': aggregators.DominantGradientCorrectionFactory,
      'principal': aggregators.PrincipalGradientFactory,
  }[name]()


class _PeakRss:
  """Samples the peak RSS of this process and of the current worker_binary in a thread."""

  def __init__(self):
    self._stop = threading.Event()
    self.base = self.peak = (0, 0)
    self._thread = None

  def _sample(self):
    own = psutil.Process().memory_info().rss
    worker = 0
    pid = runtime.current_worker_pid()
    if pid:
      try:
        worker = psutil.Process(pid).memory_info().rss
      except psutil.Error:
        pass
    return own, worker

  def __enter__(self):
    self.base = self.peak = self._sample()
    self._stop.clear()

    def loop():
      while not self._stop.wait(0.02):
        s = self._sample()
        self.peak = (max(self.peak[0], s[0]), max(self.peak[1], s[1]))

    self._thread = threading.Thread(target=loop, daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc):
    self._stop.set()
    self._thread.join()
    s = self._sample()
    self.peak = (max(self.peak[0], s[0]), max(self.peak[1], s[1]))

  def extra_gb(self):
    return tuple((p - b) / 1e9 for p, b in zip(self.peak, self.base))


def _run_one(name, model_fn, data, rounds, runner_kind):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict.aggregators import gather  # pylint: disable=g-import-not-at-top
  limit = None if runner_kind == 'inprocess' else gather.max_gather_bytes()
  with gather.gather_memory_limit(limit):
    process = tff.learning.algorithms.build_weighted_fed_avg(
        model_fn, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
        server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
        model_aggregator=_factory(name))
  if runner_kind == 'inprocess':
    from tff_conflict import inprocess  # pylint: disable=g-import-not-at-top
    process = inprocess.InProcessRunner(process)
  state = process.initialize()
  times = []
  with _PeakRss() as rss:
    for _ in range(rounds):
      start = time.perf_counter()
      out = process.next(state, data)
      times.append(time.perf_counter() - start)
      state = out.state
  return times, rss.extra_gb()


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--clients', default='10,50,100', help='comma-separated cohort sizes')
  parser.add_argument('--rounds', type=int, default=3, help='rounds per run (first = compile)')
  parser.add_argument('--examples', type=int, default=20, help='examples per client')
  parser.add_argument('--factories', default=','.join(FACTORIES))
  parser.add_argument('--small', action='store_true', help='784-62 softmax model instead of CNN')
  parser.add_argument('--runner', choices=('cpp', 'inprocess'), default='cpp')
  args = parser.parse_args()
  runtime.set_local_context()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict.aggregators import gather  # pylint: disable=g-import-not-at-top

  factories = [f for f in args.factories.split(',') if f]
  for f in factories:
    if f not in FACTORIES:
      raise ValueError(f'--factories: unknown {f!r}; choose from {FACTORIES}')
  if factories[0] != 'mean':
    factories = ['mean'] + [f for f in factories if f != 'mean']
  keras_fn = models.softmax_regression if args.small else models.emnist_sized_cnn
  sizes = [int(c) for c in args.clients.split(',')]
  data_all = models.random_emnist_clients(max(sizes), args.examples, args.examples)
  spec = data_all[0].element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_fn(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=spec)

  d = int(sum(np.prod(w.shape) for w in keras_fn().trainable_weights))
  limit = None if args.runner == 'inprocess' else gather.max_gather_bytes()
  k_max = gather.max_clients_for(4 * d + 4, limit)
  print(f'model: {"softmax" if args.small else "CNN"}, d = {d:,} parameters; runner: {args.runner};'
        f' gather limit: {limit} bytes (K_max = {k_max}); {args.rounds} rounds; '
        f'{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}')
  print('| K | aggregator | first round s | later rounds s (mean) | ratio to mean | '
        'peak +GB python | peak +GB worker | K x d stack GB |')
  print('|---|---|---|---|---|---|---|---|')
  for k in sizes:
    data = data_all[:k]
    base = None
    for name in factories:
      stack_gb = k * d * 4 / 1e9
      if name != 'mean' and k_max is not None and k > k_max:
        print(f'| {k} | {name} | refused (K_max = {k_max}) | | | | | {stack_gb:.2f} |', flush=True)
        continue
      if args.runner == 'cpp':
        runtime.set_local_context()   # a fresh worker per run: its memory is this run's
      times, (own_gb, worker_gb) = _run_one(name, model_fn, data, args.rounds, args.runner)
      later = float(np.mean(times[1:])) if len(times) > 1 else times[0]
      if name == 'mean':
        base = later
      ratio = later / base if base else float('nan')
      print(f'| {k} | {name} | {times[0]:.2f} | {later:.2f} | {ratio:.2f} | {own_gb:.2f} | '
            f'{worker_gb:.2f} | {stack_gb:.2f} |', flush=True)
  runtime.shutdown_workers()


if __name__ == '__main__':
  main()
