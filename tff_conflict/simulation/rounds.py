"""A round's cohort: clients sampled by (seed, round), their datasets shuffled, repeated and
batched deterministically (traced once per cohort size), and SCAFFOLD's per-client controls kept
across rounds and checkpoints (docs/design.md, "Experiments")."""

import collections
import weakref
from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf

from tff_conflict import _checks
from tff_conflict.learning import client_controls as client_controls_lib
from tff_conflict.learning import scaffold as scaffold_lib


def sample_clients(client_ids: Sequence[str], num_clients: int, *, seed: int,
                   round_num: int) -> list[str]:
  """`num_clients` distinct clients by `default_rng([seed, round_num])`, in `client_ids`' order
  (round r's sample depends only on `seed` and r); `ArgumentError` unless 1 <= num_clients <=
  len(client_ids)."""
  if not 1 <= num_clients <= len(client_ids):
    raise _checks.ArgumentError.must_be('num_clients', num_clients,
                                        f'an integer in [1, {len(client_ids)}]')
  rng = np.random.default_rng([int(seed), int(round_num)])
  return [client_ids[i] for i in np.sort(rng.choice(len(client_ids), num_clients, replace=False))]


def _shuffle_seed(config: Any, round_num: int, client_index: int) -> Any:
  """The shuffle seed of (seed, round, the client's position in the round); None: no shuffle."""
  if config.shuffle_buffer <= 0:
    return None
  return int(np.random.default_rng([int(config.seed), int(round_num), int(client_index), 1])
             .integers(0, 2**31 - 1))


def _pipeline(dataset: tf.data.Dataset, config: Any, seed: Any):
  if config.shuffle_buffer > 0:
    dataset = dataset.shuffle(config.shuffle_buffer, seed=seed, reshuffle_each_iteration=False)
  if config.client_epochs > 1:
    dataset = dataset.repeat(config.client_epochs)
  return dataset.batch(config.batch_size)


def preprocess(dataset: tf.data.Dataset, config: Any, *, round_num: int = 0,
               client_index: int = 0) -> tf.data.Dataset:
  """Shuffle (seeded by seed, round and position; no shuffle for a buffer <= 0) -> repeat
  `client_epochs` -> batch. `config`: any object with the attributes `shuffle_buffer`, `seed`,
  `client_epochs` and `batch_size` (the binaries' `experiments.config.LoopConfig`)."""
  return _pipeline(dataset, config, _shuffle_seed(config, round_num, client_index))


# Traced cohort functions per client data (alive as long as it is), kept across runs.
_COHORT_FUNCTIONS: 'weakref.WeakKeyDictionary[Any, dict[tuple, Any]]' = weakref.WeakKeyDictionary()


class RoundData:
  """A round's `preprocess`ed datasets of `train_data` (a `tff.simulation.datasets.ClientData`),
  traced as one function per cohort size where possible; `config` as in `preprocess`."""

  def __init__(self, train_data: Any, config: Any):
    self._train_data, self._config = train_data, config
    try:
      self._functions = _COHORT_FUNCTIONS.setdefault(train_data, {})
    except TypeError:  # not weakly referenceable: traced per run
      self._functions = {}
    self._element_spec, self._traceable = None, True

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
    if not self._traceable or not k:
      return self._one_by_one(client_ids, round_num)
    if self._element_spec is None:
      self._element_spec = self._one_by_one(client_ids[:1], round_num)[0].element_spec
    key = (config.shuffle_buffer, config.client_epochs, config.batch_size, k)
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
    seeds = [_shuffle_seed(config, round_num, i) or 0 for i in range(k)]
    variants = function(tf.constant(list(client_ids), tf.string), tf.constant(seeds, tf.int64))
    return [tf.data.experimental.from_variant(v, self._element_spec) for v in variants]


def scaffold_controls(process: Any, client_ids: Sequence[str]
                      ) -> Optional[client_controls_lib.ClientControls]:
  """The client controls of the population `client_ids` when `process` is built by
  `build_scaffold` (`ClientControls.for_process`, whose errors it raises), else None."""
  if scaffold_lib.control_layout(process) is None:
    return None
  return client_controls_lib.ClientControls.for_process(process, client_ids)


def checkpointed(state: Any, controls: Optional[client_controls_lib.ClientControls],
                 round_num: int) -> Any:
  """What round `round_num`'s checkpoint holds: `state`, or with `controls`
  `OrderedDict(state=state, client_controls=controls.arrays(version=round_num))`."""
  if controls is None:
    return state
  return collections.OrderedDict(state=state,
                                 client_controls=controls.arrays(version=round_num))


def restored(checkpoint: Any, controls: Optional[client_controls_lib.ClientControls]) -> Any:
  """The state of a loaded `checkpointed` value, after restoring `controls` from it."""
  if controls is None:
    return checkpoint
  controls.restore(checkpoint['client_controls'])
  return checkpoint['state']


def train_round(runner: Any, state: Any, client_ids: Sequence[str], datasets: Sequence[Any], *,
                controls: Optional[client_controls_lib.ClientControls] = None,
                round_num: Optional[int] = None) -> tuple[Any, Any]:
  """(new state, round metrics) of `runner.next(state, datasets)` for the cohort `client_ids`;
  with `controls` each dataset goes with its client's control and the controls the round returns
  are kept (labelled `round_num`; `controls.update`), the metrics returned without them."""
  if controls is None:
    output = runner.next(state, datasets)
    return output.state, output.metrics
  output = runner.next(state, controls.for_cohort(client_ids, datasets))
  return output.state, controls.update(client_ids, output, version=round_num)
