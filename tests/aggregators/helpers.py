"""Test helpers: value types of several structures, random client values, a NumPy flatten."""

import collections

import numpy as np
import tensorflow_federated as tff

from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.types import type_conversions


def value_types(dtype=np.float32):
  """(name, value_type) pairs: a tensor, a list, a tuple and nested OrderedDicts of any rank."""
  t = lambda shape, dt=dtype: tff.TensorType(dt, shape)  # noqa: E731
  return [
      ('tensor', t([5])),
      ('scalar_and_matrix_list', tff.to_type([t([]), t([2, 3])])),
      ('tuple', tff.to_type((t([3]), t([1, 2, 2])))),
      ('nested_odict', tff.to_type(collections.OrderedDict(
          zeta=t([2]), alpha=collections.OrderedDict(w=t([3, 2]), b=t([2]))))),
  ]


def _leaves(value):
  if isinstance(value, collections.abc.Mapping):
    return [x for v in value.values() for x in _leaves(v)]
  if isinstance(value, (list, tuple)):
    return [x for v in value for x in _leaves(v)]
  return [np.asarray(value)]


def flat_np(value) -> np.ndarray:
  """float64 concatenation of the leaves in container order (OrderedDict insertion order)."""
  return np.concatenate([np.asarray(x, np.float64).reshape(-1) for x in _leaves(value)])


def random_value(value_type, rng, scale=1.0):
  """A Python value of `value_type` (containers as in the type) with N(0, scale) entries."""

  def leaf(t):
    return (rng.normal(scale=scale, size=t.shape)).astype(t.dtype)

  value = type_conversions.structure_from_tensor_type_tree(leaf, value_type)
  return _to_python(value)


def _to_python(value):
  if isinstance(value, structure.Struct):
    return structure.to_odict_or_tuple(value, recursive=True)
  return value


def conflicting_updates(k, d, rng):
  """[K, d] float64 rows with many pairwise conflicts (a shared direction with random signs)."""
  base = rng.normal(size=d)
  signs = rng.choice([-1.0, 1.0], size=k)
  return signs[:, None] * base[None, :] * rng.uniform(0.5, 2.0, size=(k, 1)) + 0.7 * rng.normal(
      size=(k, d))


def unflatten_like(vector, value):
  """NumPy inverse of flat_np with the containers of `value`."""
  pos = [0]

  def build(v):
    if isinstance(v, collections.OrderedDict):
      return collections.OrderedDict((key, build(x)) for key, x in v.items())
    if isinstance(v, list):
      return [build(x) for x in v]
    if isinstance(v, tuple):
      return tuple(build(x) for x in v)
    arr = np.asarray(v)
    n = arr.size
    out = np.asarray(vector[pos[0]:pos[0] + n]).reshape(arr.shape).astype(arr.dtype)
    pos[0] += n
    return out

  return build(value)


WEIGHT_TYPE = tff.TensorType(np.float32)

COMMON_MEASUREMENTS = ('num_clients', 'num_excluded_nonfinite', 'num_excluded_zero_weight',
                       'num_participating', 'conflict_fraction_before', 'conflict_fraction_after',
                       'min_cosine', 'mean_cosine', 'aggregate_norm', 'norm_ratio')


def check_signatures(process, value_type, weight_type, state_type, extra_measurements):
  """TFF mean_test.py style checks of an AggregationProcess's type signatures."""
  assert isinstance(process, tff.templates.AggregationProcess)
  server_state = tff.FederatedType(state_type, tff.SERVER)
  assert process.initialize.type_signature == tff.FunctionType(None, server_state)
  sig = process.next.type_signature
  assert sig.parameter[0] == server_state
  assert sig.parameter[1] == tff.FederatedType(value_type, tff.CLIENTS)
  assert sig.parameter[2] == tff.FederatedType(weight_type, tff.CLIENTS)
  assert sig.result.state == server_state
  assert sig.result.result == tff.FederatedType(value_type, tff.SERVER)
  assert sig.result.result.member == value_type   # what build_weighted_fed_avg requires
  names = tuple(n for n, _ in tff.structure.iter_elements(sig.result.measurements.member))
  assert names == COMMON_MEASUREMENTS + tuple(extra_measurements)
  for name in ('num_clients', 'num_excluded_nonfinite', 'num_excluded_zero_weight',
               'num_participating'):
    assert sig.result.measurements.member[name] == tff.TensorType(np.int32)


def stack_np(values):
  return np.stack([flat_np(v) for v in values])
