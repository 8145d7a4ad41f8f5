"""A validation split carved from the clients' training data (for tuning without the test split).

    fit, validation = split_validation(train, fraction=0.2, seed=0)

Both results have the same client ids as `train`; every training example is in exactly one of
them. Tuning trains on `fit` and scores on `validation` (e.g. pooled:
`validation.create_tf_dataset_from_all_clients()`), so the test split is never read.

* `ArrayClientData` (digits, synthetic, tfds splits): client k of n_k examples gives
  `min(round(fraction n_k), n_k - 1)` examples, drawn without replacement with
  `numpy.random.default_rng([seed, k])`, to validation; it keeps at least one training example.
  The other examples stay in training, in their order.
* Any other `ClientData` (e.g. EMNIST's writers): each example goes to validation with
  probability `fraction`, decided by a stateless random number of (seed, client id, position of
  the example in the client's dataset), so the split is the same every time the data is read.
"""

import numbers

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib


def _check_fraction(fraction) -> float:
  if (isinstance(fraction, bool) or not isinstance(fraction, numbers.Real)
      or not 0 < fraction < 1):
    raise ValueError(f'fraction must be a number in (0, 1), got {fraction!r}')
  return float(fraction)


def _split_arrays(client_data, fraction, seed):
  fit, held = [], []
  for k, indices in enumerate(client_data.partition):
    n = indices.size
    n_validation = min(int(round(fraction * n)), max(n - 1, 0))
    chosen = np.zeros(n, bool)
    chosen[np.random.default_rng([seed, k]).choice(n, size=n_validation, replace=False)] = True
    fit.append(indices[~chosen])
    held.append(indices[chosen])
  return client_data.with_partition(fit), client_data.with_partition(held)


def _split_stream(client_data, fraction, seed):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  base_fn = client_data.serializable_dataset_fn

  def tagged(client_id):
    key = tf.strings.to_hash_bucket_fast(client_id, 2**62)
    client_seed = tf.stack([tf.constant(seed, tf.int64), key])

    def draw(position, element):
      u = tf.random.stateless_uniform(
          [], seed=tf.random.experimental.stateless_fold_in(client_seed, position))
      return u < fraction, element
    return base_fn(client_id).enumerate().map(draw)

  def fit_fn(client_id):
    return tagged(client_id).filter(lambda held, e: tf.logical_not(held)).map(lambda held, e: e)

  def validation_fn(client_id):
    return tagged(client_id).filter(lambda held, e: held).map(lambda held, e: e)

  make = tff.simulation.datasets.ClientData.from_clients_and_tf_fn
  return make(client_data.client_ids, fit_fn), make(client_data.client_ids, validation_fn)


def split_validation(client_data, fraction: float, *, seed: int):
  """Splits every client's training examples into `(fit, validation)` client data.

  Args:
    client_data: a `tff.simulation.datasets.ClientData` of unbatched examples.
    fraction: the share of each client's examples held out for validation, in (0, 1).
    seed: integer >= 0; the same arguments give the same split.

  Returns:
    `(fit, validation)`: two `ClientData` with the ids of `client_data` (see the module
    docstring for how examples are chosen).

  Raises:
    ValueError: a bad `fraction` or `seed`.
  """
  fraction = _check_fraction(fraction)
  seed = _checks.check_int('seed', seed, minimum=0)
  if isinstance(client_data, client_data_lib.ArrayClientData):
    return _split_arrays(client_data, fraction, seed)
  return _split_stream(client_data, fraction, seed)
