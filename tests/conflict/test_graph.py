"""The kernels under tf.function with an unknown number of clients ([None, d]), as TFF traces
them, and inside a tff.tensorflow.computation."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tests.conflict import references as ref
from tff_conflict import conflict

D = 8
STACK = tf.TensorSpec([None, D], tf.float32)
VEC = tf.TensorSpec([None], tf.float32)
MASK = tf.TensorSpec([None], tf.bool)

GRAPH = {
    'harmonize': tf.function(
        lambda u, w, l, inc, seed: conflict.harmonize_with_diagnostics(
            u, w, seed=seed, include=inc, validate=False),
        input_signature=[STACK, VEC, VEC, MASK, tf.TensorSpec([2], tf.int64)]),
    'dominant': tf.function(
        lambda u, w, l, inc, seed: conflict.dominant_correction_with_diagnostics(
            u, l, include=inc, validate=False),
        input_signature=[STACK, VEC, VEC, MASK, tf.TensorSpec([2], tf.int64)]),
    'principal': tf.function(
        lambda u, w, l, inc, seed: conflict.principal_aggregate_with_diagnostics(
            u, w, include=inc, validate=False),
        input_signature=[STACK, VEC, VEC, MASK, tf.TensorSpec([2], tf.int64)]),
    'corrective': tf.function(
        lambda u, w, l, inc, seed: conflict.corrective_aggregate_with_diagnostics(
            u, 0.5 * u[:, ::-1], l, w, include=inc, validate=False),
        input_signature=[STACK, VEC, VEC, MASK, tf.TensorSpec([2], tf.int64)]),
}
EAGER = {
    'harmonize': lambda u, w, l, inc, seed: conflict.harmonize_with_diagnostics(
        u, w, seed=seed, include=inc),
    'dominant': lambda u, w, l, inc, seed: conflict.dominant_correction_with_diagnostics(
        u, l, include=inc),
    'principal': lambda u, w, l, inc, seed: conflict.principal_aggregate_with_diagnostics(
        u, w, include=inc),
    'corrective': lambda u, w, l, inc, seed: conflict.corrective_aggregate_with_diagnostics(
        u, 0.5 * u[:, ::-1], l, w, include=inc),
}


@pytest.mark.parametrize('name', GRAPH)
def test_unknown_k_matches_eager(name):
  for num_clients in (1, 5):
    rng = np.random.default_rng(num_clients)
    u = ref.conflicting_updates(num_clients, D, seed=num_clients).astype(np.float32)
    w = rng.uniform(1, 3, num_clients).astype(np.float32)
    l = rng.uniform(0.5, 2, num_clients).astype(np.float32)
    inc = np.ones(num_clients, bool)
    if num_clients > 2:
      inc[1] = False
    seed = np.array([num_clients, 5], np.int64)
    agg, diag = GRAPH[name](u, w, l, inc, seed)
    agg_e, diag_e = EAGER[name](u, w, l, inc, tf.constant(seed))
    np.testing.assert_allclose(agg.numpy(), agg_e.numpy(), rtol=1e-5, atol=1e-6)
    assert list(diag) == list(diag_e)
    for key in diag:
      assert diag[key].dtype == diag_e[key].dtype
      assert diag[key].shape.rank == diag_e[key].shape.rank
      np.testing.assert_allclose(diag[key].numpy(), diag_e[key].numpy(), rtol=1e-5, atol=1e-6)
  # Every client excluded (weights 0 / include False / non-finite): zeros, never NaN.
  u = np.ones((3, D), np.float32)
  for w, inc in ((np.zeros(3), np.ones(3, bool)), (np.ones(3), np.zeros(3, bool))):
    agg, diag = GRAPH[name](u, w.astype(np.float32), np.ones(3, np.float32), inc,
                            np.zeros(2, np.int64))
    if name != 'dominant' or not inc.all():
      np.testing.assert_array_equal(agg.numpy(), np.zeros(D))
      assert diag['num_clients'].numpy() == 0
  agg, diag = GRAPH[name](np.full((2, D), np.nan, np.float32), np.ones(2, np.float32),
                          np.ones(2, np.float32), np.ones(2, bool), np.zeros(2, np.int64))
  np.testing.assert_array_equal(agg.numpy(), np.zeros(D))
  assert diag['num_excluded_nonfinite'].numpy() == 2


def test_diagnostics_types_are_fixed():
  _, diag = GRAPH['harmonize'](np.ones((2, D), np.float32), np.ones(2, np.float32),
                               np.ones(2, np.float32), np.ones(2, bool), np.zeros(2, np.int64))
  graph = GRAPH['principal'].get_concrete_function()
  outputs = graph.structured_outputs[1]
  for key, value in outputs.items():
    expected = tf.int32 if key.startswith('num_') else tf.float32
    assert value.dtype == expected and value.shape.rank == 0, key
  assert diag['num_projections'].dtype == tf.int32


def test_inside_tff_tensorflow_computation():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.tensorflow.computation(tff.TensorType(np.float32, [None, D]),
                              tff.TensorType(np.float32, [None]), tff.TensorType(np.int64, [2]))
  def harmonize_round(updates, weights, seed):
    agg, diag = conflict.harmonize_with_diagnostics(updates, weights, seed=seed, validate=False)
    return collections.OrderedDict(aggregate=agg, num_projections=diag['num_projections'])

  u = ref.conflicting_updates(4, D, seed=2).astype(np.float32)
  out = harmonize_round(u, np.ones(4, np.float32), np.array([3, 4], np.int64))
  expected = conflict.harmonize(u, np.ones(4, np.float32), seed=tf.constant([3, 4], tf.int64))
  np.testing.assert_allclose(out['aggregate'], expected.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('name', ['harmonize', pytest.param('principal', marks=pytest.mark.slow),
                                  pytest.param('dominant', marks=pytest.mark.slow),
                                  pytest.param('corrective', marks=pytest.mark.slow)])
def test_jit_compile_matches(name):
  if name == 'harmonize':  # XLA draws other random orders for a seed: compare the index order
    python_fn = lambda u, w, l, inc, seed: conflict.harmonize_with_diagnostics(
        u, w, order='index', include=inc, validate=False)
  else:
    python_fn = GRAPH[name].python_function
  fn = tf.function(python_fn, jit_compile=True, input_signature=GRAPH[name].input_signature)
  plain = tf.function(python_fn, input_signature=GRAPH[name].input_signature)
  u = ref.conflicting_updates(5, D, seed=1).astype(np.float32)
  args = (u, np.linspace(1, 2, 5).astype(np.float32), np.linspace(0.5, 2, 5).astype(np.float32),
          np.array([True, True, False, True, True]), np.array([4, 2], np.int64))
  agg, diag = fn(*args)
  agg_e, diag_e = plain(*args)
  np.testing.assert_allclose(agg.numpy(), agg_e.numpy(), rtol=1e-5, atol=1e-6)
  for key in diag:
    np.testing.assert_allclose(diag[key].numpy(), diag_e[key].numpy(), rtol=1e-5, atol=1e-6)
  zeros, _ = fn(np.full((3, D), np.nan, np.float32), *[a[:3] for a in args[1:4]], args[4])
  np.testing.assert_array_equal(zeros.numpy(), np.zeros(D))


def test_jit_compile_random_order_is_reproducible():
  fn = tf.function(GRAPH['harmonize'].python_function, jit_compile=True,
                   input_signature=GRAPH['harmonize'].input_signature)
  u = ref.conflicting_updates(6, D, seed=3).astype(np.float32)
  args = (u, np.ones(6, np.float32), np.ones(6, np.float32), np.ones(6, bool),
          np.array([4, 2], np.int64))
  first = fn(*args)[0].numpy()
  np.testing.assert_array_equal(first, fn(*args)[0].numpy())
  assert np.all(np.isfinite(first))
