"""`ArrayClientData`: a TFF `ClientData` over in-memory arrays and a partition of them (arrays held
once, client ids zero-padded so string order is index order, serializable dataset function).
"""

import collections
from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict.data import partition as partition_lib


def client_ids_for(num_clients: int) -> list[str]:
  """Zero-padded client ids '0'..'K-1' whose string order is their numeric order."""
  width = len(str(num_clients - 1))
  return [f'{k:0{width}d}' for k in range(num_clients)]


class ArrayClientData(tff.simulation.datasets.ClientData):
  """Client k holds the examples `x[partition[k]], y[partition[k]]`, in that order.

  Elements are single (unbatched) examples `OrderedDict(x=transform(x[i]), y=int32 scalar)`.
  Clients with no examples are allowed (their dataset is empty).
  """

  def __init__(self, x: np.ndarray, y: np.ndarray, partition: Sequence,
               *, transform: Optional[Callable[[tf.Tensor], tf.Tensor]] = None,
               num_classes: Optional[int] = None):
    """Builds the client data.

    Args:
      x: [N, ...] features, stored as given (`transform` turns them into the elements' x);
        finite, when floating-point.
      y: [N] integer labels >= 0 (< num_classes when it is given).
      partition: list of K 1-D integer index arrays into the N examples.
      transform: optional traceable elementwise map of a block of stored rows `[n, ...]` to the
        elements' `x` `[n, ...]` (applied to a client's rows at once); by default a cast to
        float32.
      num_classes: number of classes for `label_counts` (default: largest label + 1).
    """
    super().__init__()
    x = np.asarray(x)
    y = np.asarray(y)
    if x.ndim < 1 or y.ndim != 1 or x.shape[0] != y.shape[0]:
      raise _checks.ArgumentError(argument='y', value=y, message=(
          f'x must be [N, ...] and y [N] with the same N, got x shape {x.shape} and '
          f'y shape {y.shape}'))
    if y.size and (not np.issubdtype(y.dtype, np.integer) or y.min() < 0):
      raise _checks.ArgumentError(argument='y', value=y, message=(
          f'y must hold integer labels >= 0, got dtype {y.dtype}'
          + (f' and labels down to {y.min()}' if np.issubdtype(y.dtype, np.integer) else '')))
    if num_classes and y.size and y.max() >= num_classes:
      raise _checks.ArgumentError(argument='y', value=y, message=(
          f'y must hold class indices in [0, {num_classes}), got label {y.max()} '
          f'(example {int(np.argmax(y))})'))
    if np.issubdtype(x.dtype, np.inexact) and x.size and not np.isfinite(x).all():
      bad = ~np.isfinite(x.reshape(x.shape[0], -1)).all(axis=1)
      raise _checks.ArgumentError(argument='x', value=x, message=(
          f'x must be finite: {int(bad.sum())} examples hold NaN or inf (the first '
          f'is example {int(np.argmax(bad))})'))
    parts = partition_lib.check_partition(partition, x.shape[0])
    self._x = x
    self._y = y.astype(np.int32)
    self._order = (np.concatenate(parts) if parts else np.zeros(0, np.int64)).astype(np.int64)
    self._offsets = np.concatenate([[0], np.cumsum([p.size for p in parts])]).astype(np.int64)
    self._transform = transform or (lambda v: tf.cast(v, tf.float32))
    self._client_ids = client_ids_for(len(parts))
    self._index = {cid: k for k, cid in enumerate(self._client_ids)}
    self._eager_tensors = None
    minlength = int(num_classes) if num_classes else (int(self._y.max()) + 1 if y.size else 0)
    self._label_counts = np.stack(
        [np.bincount(self._y[p], minlength=minlength) for p in parts]).astype(np.int64)
    self._element_type_structure = self._dataset_fn(self._client_ids[0]).element_spec

  def _tensors(self):
    """The arrays as tensors: cached eager tensors when the outermost context is eager, else
    constants of the graph being built (TFF traces `dataset_computation` in a `tf.Graph`)."""
    if tf.compat.v1.executing_eagerly_outside_functions():
      if self._eager_tensors is None:
        with tf.init_scope(), tf.device('/cpu:0'):  # eager even when first asked inside a trace
          self._eager_tensors = tuple(
              tf.convert_to_tensor(a) for a in (self._x, self._y, self._order, self._offsets))
      return self._eager_tensors
    return tuple(tf.constant(a) for a in (self._x, self._y, self._order, self._offsets))

  def _dataset_fn(self, client_id) -> tf.data.Dataset:
    if tf.executing_eagerly():
      # A round creates its clients' datasets eagerly: index the arrays in numpy (one transform
      # op, not a dozen eager ops per client).
      k = self._index[client_id if isinstance(client_id, str) else client_id.numpy().decode()]
      indices = self._order[self._offsets[k]:self._offsets[k + 1]]
      return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
          x=self._transform(self._x[indices]), y=self._y[indices]))
    x, y, order, offsets = self._tensors()
    k = tf.strings.to_number(client_id, out_type=tf.int64)
    indices = order[offsets[k]:offsets[k + 1]]
    # The client's block is gathered and transformed at once: no per-element map to trace.
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
        x=self._transform(tf.gather(x, indices)), y=tf.gather(y, indices)))

  @property
  def client_ids(self) -> list[str]:
    return list(self._client_ids)

  @property
  def serializable_dataset_fn(self):
    return self._dataset_fn

  @property
  def element_type_structure(self):
    return self._element_type_structure

  @property
  def label_counts(self) -> np.ndarray:
    """[num_clients, num_classes] int64 counts: `label_counts[k, c]` examples of class c at k."""
    return self._label_counts.copy()

  @property
  def client_sizes(self) -> np.ndarray:
    """Number of examples of each client, in `client_ids` order."""
    return np.diff(self._offsets)

  @property
  def partition(self) -> list[np.ndarray]:
    """The example indices (into the stored arrays) of each client, in `client_ids` order."""
    return [self._order[a:b].copy() for a, b in zip(self._offsets[:-1], self._offsets[1:])]

  def with_partition(self, partition: Sequence) -> 'ArrayClientData':
    """A new `ArrayClientData` over the same arrays, transform and classes, split by `partition`
    (a list of index arrays into the stored arrays)."""
    return ArrayClientData(self._x, self._y, partition, transform=self._transform,
                           num_classes=self._label_counts.shape[1])


def partition_to_client_data(x, y, partition) -> ArrayClientData:
  """A TFF `ClientData` whose client k holds the examples `partition[k]` of `(x, y)`.

  Elements are UNBATCHED examples `OrderedDict(x=float32 [...], y=int32 scalar)` (`x[i]` cast to
  float32 with its shape kept, `y[i]` cast to int32); the training code batches them. Client ids
  are '0'..'K-1' zero-padded ('00'..'19' for 20 clients). `create_tf_dataset_from_all_clients()`
  yields every client's examples, client after client.

  Args:
    x: [N, ...] numeric features.
    y: [N] integer labels >= 0.
    partition: list of 1-D integer index arrays into the N examples, e.g. from
      `dirichlet_partition`; a client may be empty.

  Returns:
    An `ArrayClientData` (a `tff.simulation.datasets.ClientData`), which also exposes
    `label_counts` and `client_sizes`.
  """
  x = np.asarray(x)
  if x.size and not np.issubdtype(x.dtype, np.number):
    raise _checks.ArgumentError(argument='x', value=x, message=(
        f'x must be numeric, got dtype {x.dtype}'))
  return ArrayClientData(np.asarray(x, dtype=np.float32), y, partition)


def first_clients(train, test, num_clients: int, *, what: str = 'clients'):
  """The first `num_clients` clients of `train` (sorted ids), and of `test` the same clients, or
  all of them when its clients are others (a user-based split, `train.split_kind == 'user'`):
  the `@K` of a data set with its own clients (EMNIST's writers, LEAF's users).

  A split that can select its clients itself (`LeafClientData.select`) keeps its type, sizes and
  label counts. `ArgumentError` naming num_clients when `train` has fewer clients (`what`).
  """
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  ids = sorted(train.client_ids)
  if num_clients > len(ids):
    raise _checks.ArgumentError.must_be('num_clients', num_clients,
                                        f'at most the {len(ids)} {what}')
  keep = set(ids[:num_clients])

  def only(data):
    if hasattr(data, 'select'):
      return data.select({c: n for c, n in zip(data.client_ids, data.client_sizes.tolist())
                          if c in keep})
    return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
        [c for c in data.client_ids if c in keep], data.serializable_dataset_fn)

  return only(train), test if getattr(train, 'split_kind', None) == 'user' else only(test)
