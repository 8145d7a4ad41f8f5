"""Bad input: ValueError naming the argument eagerly, InvalidArgumentError inside graphs."""

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import conflict

U = np.random.default_rng(0).normal(size=(3, 4))
W = np.array([1.0, 2.0, 3.0])
L = np.array([0.5, 1.0, 1.5])

CALLS = {
    'harmonize': lambda u=U, w=W, l=L, **kw: conflict.harmonize(u, w, **kw),
    'dominant': lambda u=U, w=W, l=L, **kw: conflict.dominant_correction(u, l, **kw),
    'principal': lambda u=U, w=W, l=L, **kw: conflict.principal_aggregate(u, w, **kw),
    'corrective': lambda u=U, w=W, l=L, **kw: conflict.corrective_aggregate(u, u, l, w, **kw),
    'corrective_weights': lambda u=U, w=W, l=L, **kw: conflict.corrective_weights(u, l, **kw),
}
WEIGHTED = ['harmonize', 'principal', 'corrective']


@pytest.mark.parametrize('name', CALLS)
@pytest.mark.parametrize('bad,match', [
    (np.ones(4), 'rank 2'), (np.ones((2, 3, 4)), 'rank 2'), (np.ones((3, 0)), 'd > 0'),
    (np.ones((3, 4), np.int32), 'float32 or float64'), ('abc', 'dtype')])
def test_bad_updates(name, bad, match):
  with pytest.raises(ValueError, match=match):
    CALLS[name](u=bad)


@pytest.mark.parametrize('name', WEIGHTED)
@pytest.mark.parametrize('bad,match', [
    (np.ones(2), r'weights must have one entry per client.*K = 3'),
    (np.ones((3, 1)), 'weights must have rank 1'),
    (np.array([1.0, -0.5, 1.0]), r'weights must be non-negative, got weights\[1\] = -0.5'),
    (np.zeros(3), 'weights must not all be zero'),
    (np.array([1.0, np.nan, 1.0]), 'weights must be finite')])
def test_bad_weights(name, bad, match):
  with pytest.raises(ValueError, match=match):
    CALLS[name](w=bad)


@pytest.mark.parametrize('name', ['dominant', 'corrective', 'corrective_weights'])
def test_bad_losses(name):
  with pytest.raises(ValueError, match='losses must have one entry per client'):
    CALLS[name](l=np.ones(4))
  with pytest.raises(ValueError, match='losses must have rank 1'):
    CALLS[name](l=np.ones((3, 2)))


@pytest.mark.parametrize('name', CALLS)
def test_include_and_empty_round(name):
  with pytest.raises(ValueError, match='include excludes every client'):
    CALLS[name](include=np.zeros(3, bool))
  with pytest.raises(ValueError, match='include must have dtype bool'):
    CALLS[name](include=np.ones(3))
  with pytest.raises(ValueError, match='no clients'):
    CALLS[name](u=np.zeros((0, 4)), w=np.zeros(0), l=np.zeros(0))
  with pytest.raises(ValueError, match='validate must be a bool'):
    CALLS[name](validate='yes')


@pytest.mark.parametrize('value', [0.0, -0.1, 1.5, float('nan'), '0.5', True])
def test_bad_ratios(value):
  with pytest.raises(ValueError, match=f'selection_ratio must be a number in \\(0, 1\\], got'):
    conflict.dominant_correction(U, L, selection_ratio=value)
  with pytest.raises(ValueError, match='component_ratio must be a number in'):
    conflict.principal_aggregate(U, W, component_ratio=value)


@pytest.mark.parametrize('value', [-0.1, 1.5, float('inf'), float('nan'), None, True])
def test_bad_alpha(value):
  with pytest.raises(ValueError, match=r'alpha must be a number in \[0, 1\], got'):
    conflict.corrective_weights(U, L, alpha=value)
  with pytest.raises(ValueError, match=r'alpha must be a number in \[0, 1\], got'):
    conflict.corrective_aggregate(U, U, L, W, alpha=value)


def test_bad_order_seed_and_shapes():
  with pytest.raises(ValueError, match="order must be one of 'random', 'index', got 'rand'"):
    conflict.harmonize(U, W, order='rand')
  for seed in (1.5, 'x', np.array([1, 2, 3]), True):
    with pytest.raises(ValueError, match='seed must'):
      conflict.harmonize(U, W, seed=seed)
  with pytest.raises(ValueError, match='updates and gradients must have the same number of '
                                       'columns'):
    conflict.corrective_aggregate(U, np.ones((3, 5)), L, W)
  with pytest.raises(ValueError, match='same dtype'):
    conflict.corrective_aggregate(U, U.astype(np.float32), L, W)


def test_graph_mode_raises_invalid_argument():
  spec = [tf.TensorSpec([None, 4], tf.float64), tf.TensorSpec([None], tf.float64)]
  fn = tf.function(lambda u, w: conflict.harmonize(u, w, order='index'), input_signature=spec)
  np.testing.assert_allclose(fn(U, W).numpy(), conflict.harmonize(U, W, order='index').numpy())
  with pytest.raises(tf.errors.InvalidArgumentError, match='weights must be non-negative'):
    fn(U, np.array([1.0, -1.0, 1.0]))
  with pytest.raises(tf.errors.InvalidArgumentError, match='weights must not all be zero'):
    fn(U, np.zeros(3))
  with pytest.raises(tf.errors.InvalidArgumentError, match='weights must have one entry per'):
    fn(U, np.ones(2))
  with pytest.raises(tf.errors.InvalidArgumentError, match='no clients'):
    fn(np.zeros((0, 4)), np.zeros(0))
  free = tf.function(lambda u, w: conflict.harmonize(u, w, order='index', validate=False),
                     input_signature=spec)
  np.testing.assert_array_equal(free(U, np.zeros(3)).numpy(), np.zeros(4))
  with pytest.raises(tf.errors.InvalidArgumentError, match='weights must have one entry per'):
    free(U, np.ones(2))   # structural checks stay on with validate=False
  any_d = tf.function(lambda u, w: conflict.harmonize(u, w, validate=False),
                      input_signature=[tf.TensorSpec([None, None], tf.float64), spec[1]])
  with pytest.raises(tf.errors.InvalidArgumentError, match=r'd > 0'):
    any_d(np.zeros((3, 0)), W)
