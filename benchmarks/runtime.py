"""Execution backends: round time of the in-process runner vs TFF's C++ runtime, side by side.

    .venv/bin/python -m benchmarks.runtime                       # defaults below
    .venv/bin/python -m benchmarks.runtime --clients=10 --rounds=3 --small

Same process (FedAvg, TFF's `build_weighted_fed_avg`, on an EMNIST-sized CNN: conv32-conv64-
maxpool-dense128-dense62, about 1.2M parameters; `--small` uses a 784-10 softmax model), same
synthetic client data. For each cohort size it reports the first round (for the in-process runner
including its MapReduceForm compilation and stamping, reported apart as `build`) and the mean of
the later rounds, for the C++ runtime and the in-process runner with 1 and `--threads` threads.

The conflict aggregators' round time and peak memory in either backend (one process per case)
are measured by `benchmarks.aggregators` (`--runner=inprocess --clients=100`).

Prints a Markdown table; numbers are wall-clock seconds on whatever machine runs it.
"""

import argparse
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from benchmarks import models  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top


def _build(keras_fn, spec):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_fn(), loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=spec)

  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.01))


def _rounds(runner, data, rounds):
  state = runner.initialize()
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    state = runner.next(state, data).state
    times.append(time.perf_counter() - start)
  return state, times


def _max_diff(a, b):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  del tff
  return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
             for x, y in zip(tf.nest.flatten(a.global_model_weights),
                             tf.nest.flatten(b.global_model_weights)))


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--clients', default='10,50', help='cohort sizes, comma-separated')
  parser.add_argument('--rounds', type=int, default=3, help='rounds per backend (>= 2)')
  parser.add_argument('--examples', type=int, default=32, help='examples per client')
  parser.add_argument('--batch_size', type=int, default=16)
  parser.add_argument('--threads', type=int, default=2, help='threads of the parallel runner')
  parser.add_argument('--small', action='store_true', help='softmax model instead of the CNN')
  parser.add_argument('--skip_cpp', action='store_true', help='in-process runner only')
  args = parser.parse_args()
  cohorts = [int(c) for c in args.clients.split(',') if c]
  if args.rounds < 2 or any(c < 1 for c in cohorts) or args.threads < 1:
    parser.error('--rounds must be >= 2, cohorts and --threads >= 1')

  runtime.set_local_context()
  from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top
  keras_fn = models.softmax_regression if args.small else models.emnist_sized_cnn
  num_params = keras_fn().count_params()
  print(f'model: {"softmax" if args.small else "CNN"}, {num_params} parameters; '
        f'{args.examples} examples/client, batch {args.batch_size}, {args.rounds} rounds; '
        f'GPUs visible: {len(tf.config.list_physical_devices("GPU"))}; '
        f'CPU cores: {os.cpu_count()}')
  rows = []
  for k in cohorts:
    data = models.random_emnist_clients(k, args.examples, args.batch_size)
    spec = data[0].element_spec
    process = _build(keras_fn, spec)
    cpp_state = None
    if not args.skip_cpp:
      cpp_state, times = _rounds(process, data, args.rounds)
      rows.append((k, 'C++ runtime (worker_binary)', 0.0, times))
      cpp_steady = np.mean(times[1:])
    for threads in sorted({1, args.threads}):
      start = time.perf_counter()
      runner = inprocess.InProcessRunner(process, num_threads=threads)
      build = time.perf_counter() - start
      state, times = _rounds(runner, data, args.rounds)
      times[0] += build
      rows.append((k, f'in-process, {threads} thread(s)', build, times))
      if cpp_state is not None:
        print(f'K={k}, {threads} thread(s): max |w_inprocess - w_cpp| after {args.rounds} '
              f'rounds = {_max_diff(state, cpp_state):.2e}')
    runtime.set_local_context()  # a fresh context per cohort; ends the previous worker
  print()
  print('| clients | backend | build (s) | first round (s) | later rounds, mean (s) | '
        'later rounds vs C++ |')
  print('|---|---|---|---|---|---|')
  steady_cpp = {}
  for k, name, build, times in rows:
    steady = float(np.mean(times[1:]))
    if name.startswith('C++'):
      steady_cpp[k] = steady
    ratio = f'{steady / steady_cpp[k]:.2f}x' if k in steady_cpp else 'n/a'
    print(f'| {k} | {name} | {build:.1f} | {times[0]:.1f} | {steady:.2f} | {ratio} |')


if __name__ == '__main__':
  main()
