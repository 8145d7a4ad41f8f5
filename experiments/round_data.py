"""A round's client datasets: each sampled client's examples shuffled (seeded by seed, round and
position), repeated E times and batched (`preprocess`), made by one traced call per cohort size."""

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from experiments import config as config_lib


def shuffle_seed(seed: int, round_num: int, client_index: int) -> int:
  """A tf.data shuffle seed derived from (seed, round, position of the client in the round)."""
  return int(np.random.default_rng([int(seed), int(round_num), int(client_index), 1])
             .integers(0, 2**31 - 1))


def _pipeline(dataset: tf.data.Dataset, config: config_lib.LoopConfig, seed: Any):
  if config.shuffle_buffer > 0:
    dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=False)
  if config.client_epochs > 1:
    dataset = dataset.repeat(config.client_epochs)
  return dataset.batch(config.batch_size)


def preprocess(dataset: tf.data.Dataset, config: config_lib.LoopConfig, *, round_num: int = 0,
               client_index: int = 0) -> tf.data.Dataset:
  """Shuffle (seeded) -> repeat `client_epochs` -> batch `batch_size`."""
  seed = shuffle_seed(config.seed, round_num, client_index) if config.shuffle_buffer > 0 else None
  return _pipeline(dataset, config, seed)


# Traced functions per client data (alive as long as it is) and (pipeline settings, cohort size),
# kept across the runs that share them.
_FUNCTIONS: 'weakref.WeakKeyDictionary[Any, dict[tuple, Any]]' = weakref.WeakKeyDictionary()


class RoundData:
  """`preprocess` of `train_data.create_tf_dataset_for_client(cid)` for a round's clients, the
  client data's `serializable_dataset_fn` and the pipeline traced into one function per cohort
  size (eagerly, each client costs 1-17 ms of Python-built ops); client data whose dataset
  function cannot be traced, or traces to other element specs, is read one client at a time."""

  def __init__(self, train_data: Any, config: config_lib.LoopConfig):
    self._train_data = train_data
    self._config = config
    try:
      self._functions = _FUNCTIONS.setdefault(train_data, {})
    except TypeError:  # not weakly referenceable: traced per run
      self._functions = {}
    self._element_spec = None
    self._traceable = True

  def _trace(self, k: int):
    dataset_fn, config, specs = self._train_data.serializable_dataset_fn, self._config, []

    def make(client_ids, seeds):
      datasets = [_pipeline(dataset_fn(client_ids[i]), config, seeds[i]) for i in range(k)]
      specs.extend(d.element_spec for d in datasets)
      return [tf.data.experimental.to_variant(d) for d in datasets]

    signature = [tf.TensorSpec([k], tf.string), tf.TensorSpec([k], tf.int64)]
    return tf.function(make, input_signature=signature,
                       autograph=False).get_concrete_function(), specs

  def _one_by_one(self, client_ids, round_num):
    return [preprocess(self._train_data.create_tf_dataset_for_client(cid), self._config,
                       round_num=round_num, client_index=i)
            for i, cid in enumerate(client_ids)]

  def __call__(self, client_ids: Sequence[str], round_num: int) -> list[tf.data.Dataset]:
    """The datasets of `client_ids` (in this order) in round `round_num`."""
    config, k = self._config, len(client_ids)
    key = (config.shuffle_buffer, config.client_epochs, config.batch_size, k)
    if not self._traceable or not k:
      return self._one_by_one(client_ids, round_num)
    if self._element_spec is None:
      self._element_spec = self._one_by_one(client_ids[:1], round_num)[0].element_spec
    if key not in self._functions:
      try:
        self._functions[key] = self._trace(k)
      except Exception:  # pylint: disable=broad-except
        self._traceable = False  # e.g. a dataset function that runs Python on the client id
        return self._one_by_one(client_ids, round_num)
    function, specs = self._functions[key]
    if any(spec != self._element_spec for spec in specs):
      self._traceable = False  # traced, the datasets would have other shapes or types
      return self._one_by_one(client_ids, round_num)
    seeds = [shuffle_seed(config.seed, round_num, i) if config.shuffle_buffer > 0 else 0
             for i in range(k)]
    variants = function(tf.constant(list(client_ids), tf.string), tf.constant(seeds, tf.int64))
    return [tf.data.experimental.from_variant(v, self._element_spec) for v in variants]
