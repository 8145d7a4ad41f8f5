"""FedDecorr's decorrelation term against a float64 loop reference written from the authors' code
(`FedDecorrLoss`) and from the paper's text (Sec. 4), hand-worked cases and its gradient."""

import math

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import losses


def reference(z, form='authors', eps=1e-8):
  """Plain loops: standardise each column, then the authors' or the text's form."""
  rows = [[float(v) for v in np.ravel(r)] for r in np.asarray(z, np.float64)]
  n, m = len(rows), len(rows[0])
  if n == 1:
    return 0.0
  columns = []
  for j in range(m):
    col = [r[j] for r in rows]
    mean = sum(col) / n
    centred = [v - mean for v in col]
    var = sum(v * v for v in centred) / ((n - 1) if form == 'authors' else n)
    columns.append([v / math.sqrt(eps + var) for v in centred])
  gram = [[sum(columns[j][i] * columns[k][i] for i in range(n)) for k in range(m)]
          for j in range(m)]
  if form == 'authors':
    off = [gram[j][k] ** 2 for j in range(m) for k in range(m) if j != k]
    return (sum(off) / len(off) if off else 0.0) / n
  return sum((gram[j][k] / n) ** 2 for j in range(m) for k in range(m)) / (m * m)


@pytest.mark.parametrize('form', ['authors', 'paper'])
@pytest.mark.parametrize('shape', [(2, 2), (5, 3), (16, 8), (7, 1), (3, 2, 2), (1, 4)])
def test_equals_the_loop_reference_on_random_batches(form, shape):
  rng = np.random.default_rng(sum(shape))
  z = rng.normal(size=shape) * rng.uniform(0.1, 5.0, size=shape[1:]) + rng.normal(size=shape[1:])
  got = losses.decorrelation_loss(tf.constant(z, tf.float64), form=form)
  np.testing.assert_allclose(float(got), reference(z, form), rtol=1e-10, atol=1e-14)
  got32 = losses.decorrelation_loss(tf.constant(z, tf.float32), form=form)
  np.testing.assert_allclose(float(got32), reference(z, form), rtol=2e-4, atol=1e-6)


def test_hand_worked_cases():
  correlated = tf.constant([[1.0, 1.0], [-1.0, -1.0]], tf.float64)
  uncorrelated = tf.constant([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]], tf.float64)
  # Authors: unbiased var 2, standardised entries +-1/sqrt(2): C = all ones, mean off-diag^2 = 1,
  # over N = 2.
  np.testing.assert_allclose(float(losses.decorrelation_loss(correlated)), 0.5, rtol=1e-7)
  # Paper: K = all ones (perfect correlation), ||K||_F^2 / m^2 = 4 / 4.
  np.testing.assert_allclose(float(losses.decorrelation_loss(correlated, form='paper')), 1.0,
                             rtol=1e-7)
  # Orthogonal columns: no off-diagonal mass; the paper's K = I gives m / m^2.
  assert float(losses.decorrelation_loss(uncorrelated)) == pytest.approx(0.0, abs=1e-15)
  np.testing.assert_allclose(float(losses.decorrelation_loss(uncorrelated, form='paper')), 0.5,
                             rtol=1e-7)
  # One example: 0 (the authors' code returns 0.0); one feature: no off-diagonal entry.
  for form in ('authors', 'paper'):
    assert float(losses.decorrelation_loss(tf.ones([1, 5]), form=form)) == 0.0
  assert float(losses.decorrelation_loss(tf.constant([[1.0], [2.0], [4.0]]))) == 0.0


@pytest.mark.parametrize('form', ['authors', 'paper'])
def test_gradient_matches_finite_differences_and_is_finite_for_constant_columns(form):
  rng = np.random.default_rng(4)
  z = rng.normal(size=(6, 3))
  var = tf.Variable(z)
  with tf.GradientTape() as tape:
    value = losses.decorrelation_loss(var, form=form)
  grad = tape.gradient(value, var).numpy()
  numeric = np.zeros_like(z)
  step = 1e-6
  for idx in np.ndindex(z.shape):
    plus, minus = z.copy(), z.copy()
    plus[idx] += step
    minus[idx] -= step
    numeric[idx] = (reference(plus, form) - reference(minus, form)) / (2 * step)
  np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)
  constant = tf.Variable(np.concatenate([z[:, :2], np.full((6, 1), 3.0)], axis=1))
  with tf.GradientTape() as tape:
    value = losses.decorrelation_loss(constant, form=form)
  assert np.isfinite(float(value))
  assert np.all(np.isfinite(tape.gradient(value, constant).numpy()))


@pytest.mark.parametrize('kwargs,match', [
    (dict(representations=tf.constant([1, 2]), form='authors'), 'float'),
    (dict(representations=tf.constant([1.0, 2.0]), form='authors'), r'\[N, m\]'),
    (dict(representations=tf.ones([2, 2]), form='text'), 'form'),
])
def test_bad_input_is_refused(kwargs, match):
  with pytest.raises(ValueError, match=match):
    losses.decorrelation_loss(**kwargs)
