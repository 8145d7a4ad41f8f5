"""Eager calls run as cached graphs: the same results as op-by-op execution, one trace for any K
and d, errors raised before any trace or work."""

import numpy as np
import pytest
import tensorflow as tf

from tests.conflict import references as ref
from tff_conflict import conflict
from tff_conflict.conflict import _eager

KERNELS = {
    'harmonize': lambda u, d, w, l, **kw: conflict.harmonize(u, w, seed=3, **kw),
    'harmonize_with_diagnostics': lambda u, d, w, l, **kw: conflict.harmonize_with_diagnostics(
        u, w, seed=np.array([4, 5]), **kw),
    'harmonize_index': lambda u, d, w, l, **kw: conflict.harmonize(u, w, order='index', **kw),
    'dominant_correction': lambda u, d, w, l, **kw: conflict.dominant_correction(u, l, **kw),
    'dominant_correction_with_diagnostics':
        lambda u, d, w, l, **kw: conflict.dominant_correction_with_diagnostics(
            u, l, selection_ratio=0.3, **kw),
    'principal_aggregate': lambda u, d, w, l, **kw: conflict.principal_aggregate(u, w, **kw),
    'principal_aggregate_with_diagnostics':
        lambda u, d, w, l, **kw: conflict.principal_aggregate_with_diagnostics(u, w, **kw),
    'corrective_weights': lambda u, d, w, l, **kw: conflict.corrective_weights(d, l, **kw),
    'corrective_aggregate': lambda u, d, w, l, **kw: conflict.corrective_aggregate(
        u, d, l, w, alpha=0.3, **kw),
    'corrective_aggregate_with_diagnostics':
        lambda u, d, w, l, **kw: conflict.corrective_aggregate_with_diagnostics(
            u, d, l, w, **kw),
    'pairwise_cosine': lambda u, d, w, l, **kw: conflict.pairwise_cosine(u),
    'conflict_stats': lambda u, d, w, l, **kw: conflict.conflict_stats(u, **kw),
}


def _inputs(num_clients, dim, dtype, seed=0):
  rng = np.random.default_rng(seed)
  u = ref.conflicting_updates(num_clients, dim, seed).astype(dtype)
  d = ref.conflicting_updates(num_clients, dim, seed + 1).astype(dtype)
  u[1] = np.nan   # a non-finite row takes the kernels' cleaning branch
  include = np.ones(num_clients, bool)
  include[2] = False
  return u, d, rng.uniform(1, 5, num_clients), rng.uniform(0.5, 2, num_clients), include


def _flat(result):
  return [t.numpy() for t in tf.nest.flatten(result)]


@pytest.mark.parametrize('name', KERNELS)
@pytest.mark.parametrize('dtype', [np.float32, np.float64])
def test_same_result_as_op_by_op(name, dtype):
  u, d, w, l, include = _inputs(7, 33, dtype)
  kwargs = {} if name == 'pairwise_cosine' else {'include': include}
  graph = KERNELS[name](u, d, w, l, **kwargs)
  tf.config.run_functions_eagerly(True)   # the implementation runs op by op
  try:
    eager = KERNELS[name](u, d, w, l, **kwargs)
  finally:
    tf.config.run_functions_eagerly(False)
  assert tf.nest.map_structure(lambda t: t.dtype, graph) == \
      tf.nest.map_structure(lambda t: t.dtype, eager)
  for a, b in zip(_flat(graph), _flat(eager)):
    np.testing.assert_array_equal(a, b)


def test_one_trace_serves_every_number_of_clients_and_dimension():
  _eager.clear()
  for num_clients, dim in ((3, 8), (10, 8), (4, 17), (1, 1)):
    u, d, w, l, _ = _inputs(max(num_clients, 3), dim, np.float32)
    conflict.harmonize(u[:num_clients], w[:num_clients], seed=1, validate=False)
    conflict.corrective_aggregate(u[:num_clients], d[:num_clients], l[:num_clients],
                                  w[:num_clients], validate=False)
  assert _eager.num_functions() == 2
  conflict.harmonize(u.astype(np.float64), w, seed=1, validate=False)   # a new dtype
  conflict.corrective_aggregate(u, d, l, w, alpha=0.2, validate=False)  # a new hyperparameter
  assert _eager.num_functions() == 4


def test_errors_are_raised_before_any_trace():
  _eager.clear()
  u, d, w, l, _ = _inputs(3, 4, np.float64)
  with pytest.raises(ValueError, match='weights must be non-negative'):
    conflict.harmonize(u, -w)
  with pytest.raises(ValueError, match='selection_ratio must be a number in'):
    conflict.dominant_correction(u, l, selection_ratio=2.0)
  with pytest.raises(ValueError, match='updates and gradients must have the same number'):
    conflict.corrective_aggregate(u, d[:, :2], l, w)
  with pytest.raises(ValueError, match='include excludes every client'):
    conflict.principal_aggregate(u, w, include=np.zeros(3, bool))
  assert _eager.num_functions() == 0


def test_cache_is_bounded(monkeypatch):
  _eager.clear()
  monkeypatch.setattr(_eager, 'MAX_FUNCTIONS', 2)
  u, _, w, _, _ = _inputs(3, 4, np.float64)
  first = conflict.principal_aggregate(u, w, component_ratio=0.5, validate=False).numpy()
  for ratio in (0.6, 0.7, 0.9):
    conflict.principal_aggregate(u, w, component_ratio=ratio, validate=False)
  assert _eager.num_functions() == 2
  again = conflict.principal_aggregate(u, w, component_ratio=0.5, validate=False).numpy()
  np.testing.assert_array_equal(first, again)   # evicted, traced again, same result


def test_graph_callers_are_not_dispatched():
  _eager.clear()
  spec = [tf.TensorSpec([None, 4], tf.float64), tf.TensorSpec([None], tf.float64)]
  fn = tf.function(lambda u, w: conflict.harmonize(u, w, order='index'), input_signature=spec)
  u, _, w, _, _ = _inputs(3, 4, np.float64)
  np.testing.assert_array_equal(fn(u, w).numpy(),
                                conflict.harmonize(u, w, order='index').numpy())
  assert _eager.num_functions() == 1   # only the eager call above
