"""Execution backends: the in-process runner vs TFF's C++ runtime, side by side in one run:
`python -m perf.runtime [--presets=digits,cnn] [--algorithms=fedavg,fedgh] [--clients=10,50]`
prints cold and later rounds' wall and CPU time, peak memory and the weights' difference."""

import argparse
import collections
import functools
import os
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import psutil  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from perf import workloads  # pylint: disable=g-import-not-at-top
from perf.memory import PeakRss  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top

PRESETS = ('digits', 'cnn')
ALGORITHMS = ('fedavg', 'fedgh')

Case = collections.namedtuple('Case', 'process datasets')


def cpu_seconds() -> float:
  """CPU time of this process and its children (TFF's worker) so far."""
  process = psutil.Process()
  times = process.cpu_times()
  total = times.user + times.system
  for child in process.children(recursive=True):
    try:
      child_times = child.cpu_times()
    except psutil.Error:
      continue
    total += child_times.user + child_times.system
  return total


def digits_case(algorithm: str, num_clients: int) -> Case:
  """The README's digits task (Dirichlet 0.1, the MLP, E = 2, batch 20) for `num_clients` clients
  per round."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from experiments import config as experiment_config  # pylint: disable=g-import-not-at-top
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict.simulation import rounds  # pylint: disable=g-import-not-at-top
  train, _ = data.digits(num_clients=max(20, num_clients), alpha=0.1, seed=0)
  config = experiment_config.LoopConfig(rounds=1, clients_per_round=num_clients,
                                        client_epochs=2, batch_size=20)
  ids = train.client_ids[:num_clients]

  def datasets(round_num):
    return [rounds.preprocess(train.create_tf_dataset_for_client(cid), config,
                              round_num=round_num, client_index=i)
            for i, cid in enumerate(ids)]

  spec = datasets(0)[0].element_spec
  keras_fn = functools.partial(models.mlp, tuple(spec['x'].shape[1:]), 10, seed=0)
  process = learning.ALGORITHMS[algorithm](
      keras_fn, input_spec=spec, client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1))
  return Case(process, datasets)


def cnn_case(algorithm: str, num_clients: int, examples: int) -> Case:
  """The EMNIST-sized CNN (`workloads.emnist_sized_cnn`) on random synthetic clients."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  clients = workloads.random_emnist_clients(num_clients, examples, 20)
  process = learning.ALGORITHMS[algorithm](
      workloads.emnist_sized_cnn, input_spec=clients[0].element_spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05))
  return Case(process, lambda round_num: clients)


def run_backend(make_runner, initial_state, datasets, rounds):
  """(cold wall, cold CPU, later walls, later CPUs, final state, (+GB python, GB worker)).

  Cold is from `make_runner()` through `initialize()` and the first `next`; the rounds start from
  `initial_state`, so both backends run the same rounds (FedGH draws its seed in `initialize`).
  """
  with PeakRss() as rss:
    cpu_start, start = cpu_seconds(), time.perf_counter()
    runner = make_runner()
    runner.initialize()  # timed for both backends; the rounds start from `initial_state`
    state = runner.next(initial_state, datasets(1)).state
    cold, cold_cpu = time.perf_counter() - start, cpu_seconds() - cpu_start
    walls, cpus = [], []
    for round_num in range(2, rounds + 1):
      data = datasets(round_num)
      cpu_start, start = cpu_seconds(), time.perf_counter()
      state = runner.next(state, data).state
      walls.append(time.perf_counter() - start)
      cpus.append(cpu_seconds() - cpu_start)
  return cold, cold_cpu, walls, cpus, state, rss.extra_gb()


def _in_process_runner(process, num_threads):
  from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top
  return inprocess.InProcessRunner(process, num_threads=num_threads)


def num_parameters(state) -> int:
  return sum(int(np.size(w)) for w in tf.nest.flatten(state.global_model_weights.trainable))


def max_weight_difference(a, b) -> float:
  return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
             for x, y in zip(tf.nest.flatten(a.global_model_weights),
                             tf.nest.flatten(b.global_model_weights)))


def _load() -> str:
  return '/'.join(f'{x:.1f}' for x in os.getloadavg())


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--presets', default=','.join(PRESETS), help='digits and/or cnn')
  parser.add_argument('--algorithms', default=','.join(ALGORITHMS), help='fedavg and/or fedgh')
  parser.add_argument('--clients', default='10,50', help='clients per round, comma-separated')
  parser.add_argument('--rounds', type=int, default=4, help='rounds per backend (>= 2)')
  parser.add_argument('--examples', type=int, default=20, help='examples per client (cnn)')
  parser.add_argument('--threads', type=int, default=1,
                      help='num_threads of the in-process runner; > 1 adds a row')
  args = parser.parse_args()
  presets = [p for p in args.presets.split(',') if p]
  algorithms = [a for a in args.algorithms.split(',') if a]
  cohorts = [int(c) for c in args.clients.split(',') if c]
  if (args.rounds < 2 or not cohorts or any(c < 1 for c in cohorts) or args.threads < 1
      or not set(presets) <= set(PRESETS) or not set(algorithms) <= set(ALGORITHMS)):
    parser.error(f'--presets in {PRESETS}, --algorithms in {ALGORITHMS}, --rounds >= 2, '
                 '--clients and --threads >= 1')

  runtime.set_local_context()
  print(f'{args.rounds} rounds per backend; GPUs visible: '
        f'{len(tf.config.list_physical_devices("GPU"))}; CPU cores: {os.cpu_count()}; '
        f'load average (1/5/15 min) at start: {_load()}', flush=True)
  rows = []
  for preset in presets:
    for num_clients in cohorts:
      for algorithm in algorithms:
        if preset == 'digits':
          case = digits_case(algorithm, num_clients)
        else:
          case = cnn_case(algorithm, num_clients, args.examples)
        runtime.set_local_context()  # a fresh worker for this case's C++ cold start
        initial = case.process.initialize()
        runtime.set_local_context()
        label = (preset, algorithm, num_clients)
        load_before = _load()
        cpp = run_backend(lambda: case.process, initial, case.datasets, args.rounds)
        stack_gb = num_clients * num_parameters(initial) * 4 / 1e9
        rows.append(label + ('C++ runtime',) + cpp[:4] + (None, cpp[5], stack_gb))
        for threads in [1] + ([args.threads] if args.threads > 1 else []):
          result = run_backend(functools.partial(_in_process_runner, case.process, threads),
                               initial, case.datasets, args.rounds)
          difference = max_weight_difference(result[4], cpp[4])
          rows.append(label + (f'in-process, {threads} thread(s)',) + result[:4]
                      + (difference, result[5], stack_gb))
        print(f'{preset} {algorithm} K={num_clients}: done; load average before/after: '
              f'{load_before} / {_load()}', flush=True)

  print()
  print('| preset | algorithm | clients | backend | cold (s) | later (s) | cold CPU (s) | '
        'later CPU (s) | cold ratio | later ratio | CPU ratios cold / later | max abs dw | '
        'peak +GB python | peak +GB worker | K x d stack GB |')
  print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
  cpp_rows = {}
  for (preset, algorithm, k, name, cold, cold_cpu, walls, cpus, difference, (own_gb, worker_gb),
       stack_gb) in rows:
    later, later_cpu = float(np.mean(walls)), float(np.mean(cpus))
    cells = ['-'] * 4
    if difference is None:
      cpp_rows[(preset, algorithm, k)] = (cold, later, cold_cpu, later_cpu)
    else:
      c_cold, c_later, c_cold_cpu, c_later_cpu = cpp_rows[(preset, algorithm, k)]
      cells = [f'{cold / c_cold:.2f}x', f'{later / c_later:.2f}x',
               f'{cold_cpu / c_cold_cpu:.2f}x / {later_cpu / c_later_cpu:.2f}x',
               f'{difference:.1e}']
    print(f'| {preset} | {algorithm} | {k} | {name} | {cold:.2f} | {later:.3f} | {cold_cpu:.2f} '
          f'| {later_cpu:.3f} | ' + ' | '.join(cells) + f' | {own_gb:.2f} | {worker_gb:.2f} | '
          f'{stack_gb:.3f} |')
  print(f'\nload average at end: {_load()}')
  runtime.shutdown_workers()


if __name__ == '__main__':
  main()
