"""A validation split carved from the clients' training data (for tuning without the test split)."""

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib

# A batch size larger than any client's dataset: `batch(_WHOLE)` yields a client as one block.
_WHOLE = 2**62


def held_out_count(n: int, fraction: float) -> int:
  """How many of a client's `n` examples go to validation: `min(round(fraction n), n - 1)`,
  and 0 for an empty client (Python's `round`, halves to even)."""
  return min(int(round(fraction * n)), max(n - 1, 0))


def _split_arrays(client_data, fraction, seed):
  fit, held = [], []
  for k, indices in enumerate(client_data.partition):
    n = indices.size
    chosen = np.zeros(n, bool)
    chosen[np.random.default_rng([seed, k]).choice(
        n, size=held_out_count(n, fraction), replace=False)] = True
    fit.append(indices[~chosen])
    held.append(indices[chosen])
  return client_data.with_partition(fit), client_data.with_partition(held)


def _held_out_mask(n, client_id, fraction, seed):
  """[n] bool: which of the client's n examples are held out (TF ops, graph or eager)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  n = tf.cast(n, tf.int64)
  count = tf.minimum(tf.cast(tf.round(fraction * tf.cast(n, tf.float64)), tf.int64),
                     tf.maximum(n - 1, 0))  # tf.round rounds halves to even, as Python's round
  client_seed = tf.stack([tf.constant(seed, tf.int64),
                          tf.strings.to_hash_bucket_fast(client_id, 2**62)])
  draws = tf.random.stateless_uniform(tf.reshape(n, [1]), seed=client_seed, dtype=tf.float64)
  rank = tf.argsort(tf.argsort(draws, stable=True), stable=True)
  return tf.cast(rank, tf.int64) < count


def _is_dense_and_static(element_spec) -> bool:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return all(type(s) is tf.TensorSpec and s.shape.is_fully_defined()  # pylint: disable=unidiomatic-typecheck
             for s in tf.nest.flatten(element_spec))


def _split_blocks(client_data, fraction, seed):
  """Each client's examples read as one block (`batch`), split by the mask, sliced again.

  The carving is one `tf.function` traced once per split: creating a client's dataset eagerly
  (as a training round does) costs a function call beside reading the data, and the dataset
  handed to the round is the examples themselves (`from_tensor_slices`), as the unsplit data's.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  base_fn = client_data.serializable_dataset_fn
  spec = client_data.element_type_structure

  @tf.function(input_signature=[tf.data.DatasetSpec(spec), tf.TensorSpec([], tf.string),
                                tf.TensorSpec([], tf.bool)], autograph=False)
  def carve(dataset, client_id, held):
    # The whole client as one batch, or an empty block when it has no example.
    empty = tf.nest.map_structure(lambda s: tf.zeros([0] + s.shape.as_list(), s.dtype), spec)
    block = dataset.batch(_WHOLE).concatenate(
        tf.data.Dataset.from_tensors(empty)).take(1).get_single_element()
    mask = _held_out_mask(tf.shape(tf.nest.flatten(block)[0])[0], client_id, fraction, seed)
    keep = tf.equal(mask, held)
    return tf.nest.map_structure(lambda t: tf.boolean_mask(t, keep), block)

  def part(client_id, held):
    return tf.data.Dataset.from_tensor_slices(carve(base_fn(client_id), client_id, held))

  make = tff.simulation.datasets.ClientData.from_clients_and_tf_fn
  return (make(client_data.client_ids, lambda client_id: part(client_id, False)),
          make(client_data.client_ids, lambda client_id: part(client_id, True)))


def _split_stream(client_data, fraction, seed):
  """Elements of varying shape: one pass counts the client's examples, a second filters."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  base_fn = client_data.serializable_dataset_fn

  def part(client_id, held):
    n = base_fn(client_id).reduce(tf.constant(0, tf.int64), lambda count, _: count + 1)
    mask = _held_out_mask(n, client_id, fraction, seed)
    return base_fn(client_id).enumerate().filter(
        lambda position, _: tf.equal(tf.gather(mask, position), held)).map(
            lambda _, element: element)

  make = tff.simulation.datasets.ClientData.from_clients_and_tf_fn
  return (make(client_data.client_ids, lambda client_id: part(client_id, False)),
          make(client_data.client_ids, lambda client_id: part(client_id, True)))


def split_validation(client_data, fraction: float, *, seed: int):
  """Splits every client's training examples into `(fit, validation)` client data.

  Args:
    client_data: a `tff.simulation.datasets.ClientData` of unbatched examples.
    fraction: the share of each client's examples held out for validation, in (0, 1).
    seed: integer >= 0; the same arguments give the same split.

  Returns:
    `(fit, validation)`: two `ClientData` with the ids of `client_data`. A client of n examples
    gives `held_out_count(n, fraction)` of them, chosen uniformly without replacement, to
    validation and keeps the others, in their order, for training (so it keeps at least one).
    `ArrayClientData` draws with `numpy.random.default_rng([seed, k])` (k: the client's index);
    any other `ClientData` (EMNIST's and LEAF's writers) with TF's stateless generator seeded by
    (seed, hash of the client id): the client's examples are read as one block and carved by
    index, so a round reads the data once and runs no per-example function (elements of varying
    shape take two passes, a count and a filter, with the same choice).

  Raises:
    ValueError: a bad `fraction` or `seed`.
  """
  fraction = _checks.check_fraction('fraction', fraction)
  seed = _checks.check_int('seed', seed, minimum=0)
  if isinstance(client_data, client_data_lib.ArrayClientData):
    return _split_arrays(client_data, fraction, seed)
  if _is_dense_and_static(client_data.element_type_structure):
    return _split_blocks(client_data, fraction, seed)
  return _split_stream(client_data, fraction, seed)
