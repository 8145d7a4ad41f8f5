"""Runs whose cohorts change: the run loop over a population with an empty client, rounds of 10
and 9 participants, completes and writes one metrics row per round, for every method.

The default selection runs FedCorrective (whose per-client corrective weights change length with
the cohort) on both runtimes; the other methods are slow.
"""

import collections
import functools
import io
import os

import numpy as np
import pytest
import tensorflow_federated as tff

from experiments import config as config_lib
from experiments import experiment_lib
from tff_conflict.simulation import training_loop
from tff_conflict import learning
from tff_conflict import models
from tff_conflict import runtime
from tff_conflict.simulation import metrics as metrics_lib
from tff_conflict.simulation import rounds

NUM_CLIENTS, PER_ROUND, ROUNDS, SEED = 14, 10, 3, 1
EMPTY = 'c05'  # the client with no examples

FAST = {('fed_corrective', 'cpp'), ('fed_corrective', 'inprocess')}
CASES = [pytest.param(name, kind, marks=() if (name, kind) in FAST else pytest.mark.slow)
         for name in sorted(learning.ALGORITHMS) for kind in ('cpp', 'inprocess')]


@functools.lru_cache(maxsize=None)
def _population():
  rng = np.random.default_rng(0)
  centers = rng.normal(scale=3.0, size=(3, 4)).astype(np.float32)
  clients = {}
  for k in range(NUM_CLIENTS):
    n = 0 if f'c{k:02d}' == EMPTY else 6
    y = rng.integers(0, 3, n).astype(np.int32)
    clients[f'c{k:02d}'] = collections.OrderedDict(
        x=(centers[y] + rng.normal(size=(n, 4))).astype(np.float32), y=y)
  return tff.simulation.datasets.TestClientData(clients)


def _participants(round_num, ids):
  sampled = rounds.sample_clients(ids, PER_ROUND, seed=SEED, round_num=round_num)
  return PER_ROUND - (EMPTY in sampled)


def test_the_seed_samples_cohorts_of_10_and_9_participants():
  ids = _population().client_ids
  assert {_participants(r, ids) for r in range(1, ROUNDS + 1)} == {9, 10}


@pytest.mark.parametrize('name,kind', CASES)
def test_a_run_over_an_empty_client_completes_and_writes_its_metrics(name, kind, tmp_path):
  train = _population()
  config = config_lib.LoopConfig(rounds=ROUNDS, clients_per_round=PER_ROUND, batch_size=4,
                                 seed=SEED, eval_every=0, checkpoint_every=0)
  spec = rounds.preprocess(train.create_tf_dataset_for_client('c00'), config).element_spec
  builder = learning.ALGORITHMS[name]
  process = builder(
      functools.partial(models.logistic_regression, (4,), 3, seed=0), input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1),
      **experiment_lib.population_kwargs(builder, train))
  result = training_loop.run_training(
      process, train_data=train, evaluate_fn=lambda weights: {}, config=config,
      experiment_dir=str(tmp_path), hparams={'algorithm': name}, show_progress=False,
      runner=None if kind == 'cpp' else runtime.make_runner(process, kind), stream=io.StringIO(),
      test_columns=[])
  rows = metrics_lib.read_csv(os.path.join(str(tmp_path), training_loop.METRICS_FILE))
  assert [int(r['round_num']) for r in rows] == list(range(1, ROUNDS + 1))
  assert len(result[0]) == ROUNDS
  participants = [_participants(r, train.client_ids) for r in range(1, ROUNDS + 1)]
  for row, expected in zip(rows, participants):
    assert np.isfinite(float(row['train_loss']))
    assert int(float(row['client_work/train/num_examples'])) == 6 * expected
    if 'aggregator/num_participating' in row:
      assert int(float(row['aggregator/num_participating'])) == expected
  if name == 'fed_corrective':  # one corrective weight per participant: 9, then 10, then 9
    assert [int(float(r['aggregator/corrective_weights/count'])) for r in rows] == participants
    per_client = metrics_lib.read_csv(os.path.join(str(tmp_path), metrics_lib.PER_CLIENT_FILE))
    for round_num, expected in enumerate(participants, start=1):
      values = [float(r['value']) for r in per_client if int(r['round_num']) == round_num
                and r['name'] == 'aggregator/corrective_weights']
      assert len(values) == expected and np.all(np.isfinite(values))
  weights = (process if kind == 'cpp' else runtime.make_runner(process, kind)).get_model_weights(
      result[1])
  assert all(np.all(np.isfinite(np.asarray(w))) for w in weights.trainable)
