"""Cost of saving the server state every round (`tff_conflict.simulation.checkpoints`) against a
round: `python -m perf.checkpoints [--rounds=4] [--repeats=5]` prints a Markdown table of round,
save and load times and checkpoint sizes, beside TFF's `FileProgramStateManager`."""

import argparse
import asyncio
import os
import statistics
import tempfile
import time

import tff_conflict  # pylint: disable=unused-import  (quiet TF logs, before TensorFlow)
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from perf import workloads  # pylint: disable=g-import-not-at-top
from experiments import config
from experiments import experiment_lib
from tff_conflict import runtime
from tff_conflict.simulation import checkpoints
from tff_conflict.simulation import rounds


def _digits_case(clients):
  experiment = config.ExperimentConfig(
      data=config.DataConfig('digits', num_clients=20, alpha=0.1),
      model='mlp',
      training=config.LoopConfig(rounds=1, clients_per_round=clients, client_epochs=2,
                                 batch_size=20))
  train, _ = experiment_lib.load_task(experiment)
  ids = rounds.sample_clients(train.client_ids, clients, seed=0, round_num=1)
  data = [rounds.preprocess(train.create_tf_dataset_for_client(c),
                            experiment.training, round_num=1, client_index=i)
          for i, c in enumerate(ids)]
  return experiment_lib.model_of(experiment, train)[0], data


def _emnist_case(clients):
  data = workloads.random_emnist_clients(clients, 32, 16)
  return workloads.emnist_sized_cnn, data


def _measure(keras_fn, data, server_optimizer, rounds, repeats):
  """(parameters, mean round of rounds 2.., median save, median load, bytes, median TFF save).

  FedAvg on TFF's C++ runtime; round 1, which holds TFF's start-up, is not counted. Saves keep 3
  checkpoints, as the binaries do.
  """
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  server = (tff.learning.optimizers.build_adam(learning_rate=0.01) if server_optimizer == 'adam'
            else tff.learning.optimizers.build_sgdm(learning_rate=1.0))
  process = learning.build_fedavg(
      keras_fn, input_spec=data[0].element_spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05),
      server_optimizer_fn=server)
  state = process.initialize()
  round_times = []
  for _ in range(rounds):
    start = time.perf_counter()
    state = process.next(state, data).state
    round_times.append(time.perf_counter() - start)
  with tempfile.TemporaryDirectory() as root:
    manager = checkpoints.CheckpointManager(root, keep_total=3)
    saves, loads = [], []
    for version in range(1, repeats + 1):
      start = time.perf_counter()
      asyncio.run(manager.save(state, version))
      saves.append(time.perf_counter() - start)
      start = time.perf_counter()
      asyncio.run(manager.load(version, process.initialize()))
      loads.append(time.perf_counter() - start)
    size = os.path.getsize(manager.path(repeats))
  with tempfile.TemporaryDirectory() as root:
    tff_manager = tff.program.FileProgramStateManager(root_dir=root, prefix='round_',
                                                      keep_total=3, keep_first=False)
    tff_saves = []
    for version in range(1, repeats + 1):
      start = time.perf_counter()
      asyncio.run(tff_manager.save(state, version))
      tff_saves.append(time.perf_counter() - start)
  params = sum(int(tf.size(w)) for w in process.get_model_weights(state).trainable)
  return (params, statistics.mean(round_times[1:]), statistics.median(saves),
          statistics.median(loads), size, statistics.median(tff_saves))


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--clients', type=int, default=10, help='clients per round')
  parser.add_argument('--rounds', type=int, default=4, help='rounds per case (>= 2)')
  parser.add_argument('--repeats', type=int, default=5, help='saves and loads per case')
  args = parser.parse_args()
  if args.rounds < 2 or args.clients < 1 or args.repeats < 1:
    parser.error('--rounds must be >= 2, --clients and --repeats >= 1')
  runtime.set_local_context()
  cases = [('digits 2NN', _digits_case), ('EMNIST-size CNN', _emnist_case)]
  print(f'{args.clients} clients per round, {args.rounds} rounds, {args.repeats} saves per case; '
        f'CPU cores: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}')
  print()
  print('| case | server optimizer | parameters | checkpoint (MB) | round (s) | save (s) | '
        'load (s) | save / round | TFF manager save (s) | TFF save / round |')
  print('|---|---|---|---|---|---|---|---|---|---|')
  for name, build in cases:
    keras_fn, data = build(args.clients)
    for server_optimizer in ('sgd', 'adam'):
      params, round_s, save_s, load_s, size, tff_s = _measure(
          keras_fn, data, server_optimizer, args.rounds, args.repeats)
      print(f'| {name} | {server_optimizer} | {params:,} | {size / 1e6:.2f} | {round_s:.2f} | '
            f'{save_s:.3f} | {load_s:.3f} | {save_s / round_s:.1%} | {tff_s:.3f} | '
            f'{tff_s / round_s:.1%} |', flush=True)


if __name__ == '__main__':
  main()
