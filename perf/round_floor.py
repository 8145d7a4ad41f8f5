"""A round of the in-process runner, and of the benchmark's run loop, against its compute floor:
`python -m perf.round_floor [--workloads=digits10] [--aggregators=mean,fedgh] [--estimate]` prints
each round's median time and its ratio to the floor (`--estimate`: the results preset's too)."""

import collections
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import tff_conflict  # pylint: disable=g-import-not-at-top
tff_conflict.quiet()
import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags

from experiments import benchmark  # pylint: disable=g-import-not-at-top  (defines its flags)

FLAGS = flags.FLAGS
WORKLOADS = ('digits10', 'digits100', 'cnn10')
AGGREGATORS = ('mean', 'fedgh', 'dgc', 'principal', 'corrective')
flags.DEFINE_list('workloads', list(WORKLOADS), f'Among {WORKLOADS}.')
flags.DEFINE_list('aggregators', list(AGGREGATORS), 'build_process aggregators.')
flags.DEFINE_integer('repeats', 9, 'Timed rounds of each (after two warm-up rounds).', lower_bound=1)
flags.DEFINE_integer('benchmark_rounds', 20, 'Rounds of the benchmark run (0: none).',
                     lower_bound=0)
flags.DEFINE_bool('estimate', False, "Also estimate --preset=results' wall time "
                  '(perf.benchmark_grid; minutes).')

BATCH = 20
LEARNING_RATE = 0.1


@dataclasses.dataclass
class Workload:
  name: str
  train: object  # tff ClientData
  client_ids: list
  keras_model_fn: object


def _workload(name: str) -> Workload:
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  if name == 'digits10':
    train, _ = data.digits(num_clients=20, alpha=0.1, seed=0)
    ids = train.client_ids[:10]
    return Workload(name, train, ids, lambda: models.mlp((8, 8, 1), 10, seed=0))
  if name == 'digits100':
    train, _ = data.digits(num_clients=100, alpha=0.1, seed=0)
    return Workload(name, train, train.client_ids,
                    lambda: models.mlp((8, 8, 1), 10, seed=0))
  if name == 'cnn10':
    rng = np.random.default_rng(0)
    x = rng.random((600, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 62, 600)
    train = data.partition_to_client_data(x, y, np.arange(600).reshape(10, 60))
    return Workload(name, train, train.client_ids,
                    lambda: models.emnist_cnn((28, 28, 1), 62, seed=0))
  raise app.UsageError(f'--workloads: unknown workload {name!r}; choose among {WORKLOADS}')


def _datasets(w: Workload):
  return [w.train.create_tf_dataset_for_client(c).batch(BATCH) for c in w.client_ids]


def _floor(w: Workload):
  """The floor: one `tf.function` of the K clients' local SGD steps (batches as constants) and
  the example-weighted mean; a new Keras model (create it after TFF's tracing)."""
  clients = []
  for c in w.client_ids:
    batches = list(w.train.create_tf_dataset_for_client(c).batch(BATCH).as_numpy_iterator())
    clients.append([(tf.constant(b['x']), tf.constant(b['y'])) for b in batches])
  sizes = [sum(int(y.shape[0]) for _, y in batches) for batches in clients]
  total = float(sum(sizes))
  model = w.keras_model_fn()
  server = [tf.Variable(v) for v in model.trainable_variables]
  loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)

  @tf.function
  def fused_round():
    deltas = []
    for batches in clients:
      for v, s in zip(model.trainable_variables, server):
        v.assign(s)
      for x, y in batches:
        with tf.GradientTape() as tape:
          loss = loss_fn(y, model(x, training=True))
        for v, g in zip(model.trainable_variables, tape.gradient(loss, model.trainable_variables)):
          v.assign_sub(LEARNING_RATE * g)
      deltas.append([v - s for v, s in zip(model.trainable_variables, server)])
    for j, s in enumerate(server):
      s.assign_add(tf.add_n([d[j] * (n / total) for d, n in zip(deltas, sizes)]))

  fused_round()
  return fused_round


def _runner_round(w: Workload, aggregator: str):
  """A round: the K client datasets made anew and the in-process runner's `next`, for
  `learning.build_process` with `aggregator`; warmed up by two rounds."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  spec = _datasets(w)[0].element_spec
  process = learning.build_process(
      w.keras_model_fn, input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=LEARNING_RATE),
      aggregator=aggregator)
  runner = runtime.make_runner(process, 'inprocess')
  state = [runner.initialize()]

  def one_round():
    state[0] = runner.next(state[0], _datasets(w)).state

  for _ in range(2):
    one_round()
  return one_round


def _interleaved(functions: dict, repeats: int) -> dict:
  """Median seconds of each function, called in turn `repeats` times in one process."""
  times = collections.defaultdict(list)
  for _ in range(repeats):
    for name, fn in functions.items():
      start = time.perf_counter()
      fn()
      times[name].append(time.perf_counter() - start)
  return {name: statistics.median(t) for name, t in times.items()}


def _benchmark(rounds: int):
  """seconds_per_round and the whole round of the engine's FedAvg run on the digits10 setting."""
  from experiments.benchmarking import grid  # pylint: disable=g-import-not-at-top
  settings = dict(regimes='digits:dir(0.1)', methods='fedavg', epochs=['1'],
                  report_seeds=['0', '1'], vary_partition=False,
                  rounds=rounds, clients_per_round=10, client_batch_size=20,
                  models='digits:mlp', tune=False, runtime='inprocess', progress=False,
                  output_dir=tempfile.mkdtemp(prefix='round_floor_'))
  for flag, value in settings.items():
    setattr(FLAGS, flag, value)
  config = benchmark.config_from_flags()
  outcome = grid.run_benchmark(config, stream=open(os.devnull, 'w'))
  row = outcome['rows'][-1]  # the second run: its process and traced functions are warm
  whole = (row['run_seconds'] - row['first_round_s']) / (rounds - 1)
  return row['seconds_per_round'], whole, outcome['build_seconds']


def main(argv):
  del argv
  from experiments import flags_lib  # pylint: disable=g-import-not-at-top
  flags_lib.quiet_logs()
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  aggregators = list(FLAGS.aggregators)
  repeats, bench_rounds, estimate = FLAGS.repeats, FLAGS.benchmark_rounds, FLAGS.estimate
  print(f'load average before: {os.getloadavg()[0]:.1f}')
  print('\n| workload | K | floor (ms) | ' + ' | '.join(aggregators) + ' |')
  print('|---|---|---|' + '---|' * len(aggregators))
  for name in FLAGS.workloads:
    w = _workload(name)
    rounds = {a: _runner_round(w, a) for a in aggregators}  # every TFF trace before the floor
    medians = _interleaved({'floor': _floor(w), **rounds}, repeats)
    floor = medians['floor']
    cells = [f'{medians[a] * 1e3:.1f} ms, {medians[a] / floor:.1f}x' for a in aggregators]
    print(f'| {name} | {len(w.client_ids)} | {floor * 1e3:.2f} | ' + ' | '.join(cells) + ' |',
          flush=True)
  if bench_rounds:
    w = _workload('digits10')
    before = _interleaved({'floor': _floor(w)}, repeats)['floor']
    per_round, whole, build = _benchmark(bench_rounds)
    after = _interleaved({'floor': _floor(w)}, repeats)['floor']
    floor = (before + after) / 2
    print(f'\nbenchmark (digits10 setting, FedAvg, {bench_rounds} rounds): seconds_per_round '
          f'{per_round * 1e3:.1f} ms = {per_round / floor:.1f}x the floor ({before * 1e3:.2f} / '
          f'{after * 1e3:.2f} ms before / after); whole round (datasets, round, evaluation, '
          f'metrics) {whole * 1e3:.1f} ms = {whole / floor:.1f}x, harness '
          f'{(whole - per_round) / per_round:.2f}x the round; building the process {build:.1f} s')
  print(f'load average after: {os.getloadavg()[0]:.1f}')
  if estimate:
    print('\n`python -m perf.benchmark_grid --preset=results`:', flush=True)
    subprocess.run([sys.executable, '-m', 'perf.benchmark_grid', '--preset=results'], check=True)


if __name__ == '__main__':
  app.run(main)
