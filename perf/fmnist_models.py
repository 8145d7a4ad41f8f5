"""Round time of the Fashion-MNIST models on real data: `python -m perf.fmnist_models
[--models=small_mlp,fedmgc_fmnist_cnn] [--methods=fedavg] [--rounds=3] [--data_dir=DIR]` prints a
Markdown table (10 clients of 600 images per round, E = 1, batch 32, in-process runner)."""

import argparse
import functools
import os
import statistics
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

CLIENTS_PER_ROUND, BATCH_SIZE = 10, 32
REGIME = 'fashion_mnist:iid@100'   # 600 training images per client


def _time_model(model, method, rounds, data_dir):
  """(parameters, build + first round s, the other rounds' times s) of `model` under `method`."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  train, _ = data.load_regime(REGIME, seed=0, data_dir=data_dir)
  ids = train.client_ids

  def cohort(r):
    chosen = [ids[(r * CLIENTS_PER_ROUND + k) % len(ids)] for k in range(CLIENTS_PER_ROUND)]
    return [train.create_tf_dataset_for_client(c).batch(BATCH_SIZE) for c in chosen]

  model_fn = functools.partial(models.get(model), (28, 28, 1), 10, seed=0)
  start = time.monotonic()
  process = learning.ALGORITHMS[method](
      model_fn, input_spec=cohort(0)[0].element_spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05))
  runner = runtime.make_runner(process, 'inprocess')
  state = runner.initialize()
  params = sum(int(w.size) for w in runner.get_model_weights(state).trainable)
  state = runner.next(state, cohort(0)).state
  first = time.monotonic() - start
  times = []
  for r in range(1, rounds + 1):
    datasets = cohort(r)
    begin = time.monotonic()
    state = runner.next(state, datasets).state
    times.append(time.monotonic() - begin)
  return params, first, times


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--models', default='small_mlp,fedmgc_fmnist_cnn')
  parser.add_argument('--methods', default='fedavg')
  parser.add_argument('--rounds', type=int, default=3, help='timed rounds after the first')
  parser.add_argument('--data_dir', default=None)
  args = parser.parse_args()
  print('| model | method | parameters | build + round 1 (s) | round, median (s) | rounds (s) |\n'
        '|---|---|---|---|---|---|', flush=True)
  for model in args.models.split(','):
    for method in args.methods.split(','):
      params, first, times = _time_model(model, method, args.rounds, args.data_dir)
      print(f'| {model} | {method} | {params:,} | {first:.1f} | {statistics.median(times):.2f} | '
            f'{", ".join(f"{t:.2f}" for t in times)} |', flush=True)


if __name__ == '__main__':
  main()
