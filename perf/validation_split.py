"""A tuning round on `data.split_validation`'s fit part beside the same round on the unsplit data,
on LEAF-format FEMNIST: `python -m perf.validation_split [--users=49] [--runtime=cpp]` prints a
Markdown table of median data and round times and their ratio to the unsplit round."""

import argparse
import functools
import os
import shutil
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top

from perf import leaf_fixture  # pylint: disable=g-import-not-at-top


def _per_example_split(client_data, fraction, seed):
  """The fit part of the per-example split `split_validation` replaced, kept for the comparison:
  a stateless draw per example, filtered."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  base_fn = client_data.serializable_dataset_fn

  def fit_fn(client_id):
    key = tf.strings.to_hash_bucket_fast(client_id, 2**62)
    client_seed = tf.stack([tf.constant(seed, tf.int64), key])

    def draw(position, element):
      u = tf.random.stateless_uniform(
          [], seed=tf.random.experimental.stateless_fold_in(client_seed, position))
      return u < fraction, element
    return base_fn(client_id).enumerate().map(draw).filter(
        lambda held, e: tf.logical_not(held)).map(lambda held, e: e)

  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(client_data.client_ids, fit_fn)


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--users', type=int, default=49)
  parser.add_argument('--mean_samples', type=int, default=230)
  parser.add_argument('--rounds', type=int, default=20)
  parser.add_argument('--runtime', default='cpp', choices=('cpp', 'inprocess'))
  parser.add_argument('--dir', default=None)
  args = parser.parse_args()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  from experiments import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  from tff_conflict.simulation import rounds  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()

  tmp = tempfile.mkdtemp(prefix='split_bench_', dir=args.dir)
  try:
    stats = leaf_fixture.write_femnist(tmp, users=args.users, mean_samples=args.mean_samples)
    train, _ = data.leaf(os.path.join(tmp, 'data', 'femnist'))
    fit, _ = data.split_validation(train, 0.2, seed=0)
    parts = {'unsplit': train, 'split': fit,
             'per-example split (before)': _per_example_split(train, 0.2, 0)}
    config = config_lib.LoopConfig(rounds=args.rounds, clients_per_round=10, batch_size=20,
                                   seed=0)
    spec = rounds.preprocess(train.create_tf_dataset_for_client(train.client_ids[0]),
                             config).element_spec
    process = learning.build_fedavg(
        functools.partial(models.mlp, (28, 28, 1), 62, seed=0), input_spec=spec,
        client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05))
    runner = process if args.runtime == 'cpp' else runtime.make_runner(process, 'inprocess')
    state = runner.initialize()
    print(f'{stats.users} writers, {stats.train_examples} training examples; FedAvg, MLP, '
          f'{args.runtime} runtime, {args.rounds} rounds of 10 clients', flush=True)
    times = {name: {'data': [], 'next': []} for name in parts}
    for round_num in range(args.rounds + 1):  # round 0 warms every path up, untimed
      sampled = rounds.sample_clients(train.client_ids, 10, seed=0, round_num=round_num)
      names = list(parts) if round_num % 2 else list(parts)[::-1]
      for name in names:
        start = time.perf_counter()
        datasets = [rounds.preprocess(parts[name].create_tf_dataset_for_client(c), config,
                                      round_num=round_num, client_index=i)
                    for i, c in enumerate(sampled)]
        made = time.perf_counter()
        runner.next(state, datasets)  # the same state: every path runs the same round
        done = time.perf_counter()
        if round_num:
          times[name]['data'].append(made - start)
          times[name]['next'].append(done - made)
    base = np.median(np.add(times['unsplit']['data'], times['unsplit']['next']))
    print('| data | data (s) | next (s) | round (s) | round / unsplit round |\n|---|---|---|---|---|')
    for name, t in times.items():
      total = np.add(t['data'], t['next'])
      print(f'| {name} | {np.median(t["data"]):.3f} | {np.median(t["next"]):.3f} | '
            f'{np.median(total):.3f} | {np.median(total) / base:.2f}x |', flush=True)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
    runtime.shutdown_workers()


if __name__ == '__main__':
  main()
