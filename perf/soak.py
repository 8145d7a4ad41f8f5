"""A long in-process run through the experiments' run loop: are memory and time per round flat?
`python -m perf.soak [--rounds=1000] [--every=100]` prints, per block of rounds, the round's median
and 90th percentile, the median CPU time per round and the resident memory."""

import argparse
import functools
import io
import os
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import psutil  # pylint: disable=g-import-not-at-top

MB = 2**20


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--rounds', type=int, default=1000)
  parser.add_argument('--every', type=int, default=100)
  parser.add_argument('--algorithm', default='fedavg')
  args = parser.parse_args()
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  from experiments import config as config_lib  # pylint: disable=g-import-not-at-top
  from tff_conflict.simulation import training_loop  # pylint: disable=g-import-not-at-top
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  from tff_conflict.simulation import rounds  # pylint: disable=g-import-not-at-top

  train, _ = data.digits(num_clients=20, alpha=0.5, seed=0)
  config = config_lib.LoopConfig(rounds=args.rounds, clients_per_round=10, batch_size=20,
                                 seed=0, eval_every=0, checkpoint_every=0)
  spec = rounds.preprocess(train.create_tf_dataset_for_client('00'), config).element_spec
  process = learning.ALGORITHMS[args.algorithm](
      functools.partial(models.logistic_regression, tuple(spec['x'].shape[1:]), 10,
                        seed=0), input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05))
  runner = runtime.make_runner(process, 'inprocess')
  me = psutil.Process()
  stamps = []

  class Probe(tff.program.ReleaseManager):
    """Records the time, CPU time and resident memory at every round's release; a round is the
    time from one release to the next (data, round, metrics writing)."""

    async def release(self, value, key):
      del value
      stamps.append((key, time.monotonic(), time.process_time(), me.memory_info().rss))
      if key % args.every == 0:
        block = np.diff([s[1] for s in stamps[-args.every - 1:]])
        cpu = np.diff([s[2] for s in stamps[-args.every - 1:]])
        print(f'rounds {key - args.every + 1:4d}-{key:4d}: round median '
              f'{np.median(block) * 1e3:6.1f} ms, p90 {np.percentile(block, 90) * 1e3:6.1f} ms, '
              f'CPU median {np.median(cpu) * 1e3:6.1f} ms; RSS {stamps[-1][3] / MB:6.0f} MB; '
              f'load {os.getloadavg()[0]:.1f}', flush=True)

  print(f'{args.algorithm}, in process, {args.rounds} rounds; RSS before the first round '
        f'{me.memory_info().rss / MB:.0f} MB', flush=True)
  start = time.monotonic()
  with tempfile.TemporaryDirectory() as tmp:
    training_loop.run_training(
        process, train_data=train, evaluate_fn=lambda weights: {}, config=config,
        experiment_dir=tmp, hparams={'algorithm': args.algorithm}, show_progress=False,
        runner=runner, stream=io.StringIO(), test_columns=[], release_managers=[Probe()])
  total = time.monotonic() - start
  times = np.diff([s[1] for s in stamps])
  cpu = np.diff([s[2] for s in stamps])
  rss = np.array([s[3] for s in stamps]) / MB
  half = len(times) // 2
  print(f'total {total:.0f} s; round median, first half {np.median(times[:half]) * 1e3:.1f} ms '
        f'(CPU {np.median(cpu[:half]) * 1e3:.1f} ms), second half '
        f'{np.median(times[half:]) * 1e3:.1f} ms (CPU {np.median(cpu[half:]) * 1e3:.1f} ms); '
        'RSS after round 100 '
        f'{rss[min(99, len(rss) - 1)]:.0f} MB, at the end {rss[-1]:.0f} MB (growth '
        f'{(rss[-1] - rss[min(99, len(rss) - 1)]) / max(len(rss) - 100, 1) * 1024:.1f} KB per '
        'round after round 100)')


if __name__ == '__main__':
  main()
