"""Tests of Synthetic(alpha, beta) (FedProx Sec. 5.1 / Appendix C.1) and its statistics."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from tff_conflict import data
from tff_conflict.data import synthetic_data


def _tv_mean(ys):
  pooled = np.bincount(np.concatenate(ys), minlength=10) / sum(len(y) for y in ys)
  return np.mean([0.5 * np.abs(np.bincount(y, minlength=10) / len(y) - pooled).sum() for y in ys])


def test_labels_are_the_argmax_of_each_clients_model():
  arr = synthetic_data.synthetic_arrays(1.0, 1.0, num_clients=4, seed=2)
  for k in range(4):
    for x, y in zip(arr.x[k], arr.y[k]):
      logits = [sum(x[j] * arr.w[k][j][c] for j in range(60)) + arr.b[k][c] for c in range(10)]
      assert y == int(np.argmax(logits))


def test_client_sizes_and_split():
  arr = synthetic_data.synthetic_arrays(0.5, 0.5, num_clients=30, seed=0)
  sizes = np.array([len(y) for y in arr.y])
  assert sizes.min() >= 50
  # n_k - 50 = floor(LogNormal(4, 2)): log of it has mean ~4, sd ~2 (30 clients, loose bounds).
  logs = np.log(np.maximum(sizes - 50, 1))
  assert 3.0 < np.median(logs) < 5.0 and 1.0 < logs.std() < 3.0
  np.testing.assert_array_equal(arr.num_train, np.floor(0.9 * sizes).astype(int))
  train, test = data.synthetic(0.5, 0.5, num_clients=30, seed=0)
  np.testing.assert_array_equal(train.client_sizes, arr.num_train)
  np.testing.assert_array_equal(test.client_sizes, sizes - arr.num_train)
  assert train.client_ids == test.client_ids
  spec = collections.OrderedDict(x=tf.TensorSpec([60], tf.float32), y=tf.TensorSpec([], tf.int32))
  assert train.element_type_structure == spec and test.element_type_structure == spec
  first = next(iter(test.create_tf_dataset_for_client(test.client_ids[3])))
  np.testing.assert_allclose(first['x'].numpy(), arr.x[3][arr.num_train[3]], rtol=1e-6)
  assert int(first['y']) == arr.y[3][arr.num_train[3]]


def test_feature_covariance_decays_as_j_to_the_minus_1_2():
  arr = synthetic_data.synthetic_arrays(0.0, 0.0, num_clients=30, seed=0)
  centered = np.concatenate([x - x.mean(axis=0) for x in arr.x])
  variances = centered.var(axis=0)
  expected = np.arange(1, 61) ** -1.2
  assert np.all(np.abs(variances / expected - 1) < 0.15)
  slope = np.polyfit(np.log(np.arange(1, 61)), np.log(variances), 1)[0]
  assert -1.3 < slope < -1.1
  corr = np.corrcoef(centered.T) - np.eye(60)
  assert np.abs(corr).max() < 0.12  # diagonal covariance


def test_client_mean_spread_grows_with_beta():
  spreads = []
  for beta in (0.0, 0.5, 2.0, 5.0):
    arr = synthetic_data.synthetic_arrays(0.0, beta, num_clients=30, seed=1)
    spreads.append(np.std([x.mean() for x in arr.x]))
    # v_k ~ N(B_k, 1) per feature, B_k ~ N(0, beta^2): spread of client means ~ sqrt(beta^2+1/60).
    assert 0.5 < spreads[-1] / np.sqrt(beta**2 + 1 / 60) < 1.5
  assert all(a < b for a, b in zip(spreads, spreads[1:]))


def test_model_means_have_sd_alpha():
  arr = synthetic_data.synthetic_arrays(3.0, 0.0, num_clients=30, seed=0)
  assert 2.0 < arr.u.std() < 4.0
  # W_k and b_k entries ~ N(u_k, 1): 610 entries per client average to u_k within ~0.04.
  means = np.concatenate([arr.w.reshape(30, -1), arr.b], axis=1).mean(axis=1)
  assert np.abs(means - arr.u).max() < 0.2


def test_labels_do_not_depend_on_alpha():
  # u_k adds u_k * (sum_j x_j + 1) to every logit alike, so argmax ignores it (see module doc).
  a = synthetic_data.synthetic_arrays(0.0, 1.0, seed=7)
  b = synthetic_data.synthetic_arrays(5.0, 1.0, seed=7)
  for ya, yb, xa, xb in zip(a.y, b.y, a.x, b.x):
    np.testing.assert_array_equal(ya, yb)
    np.testing.assert_array_equal(xa, xb)
  assert not np.allclose(a.w, b.w)


def test_label_skew_grows_with_beta():
  for seed in range(3):
    low = _tv_mean(synthetic_data.synthetic_arrays(0.0, 0.0, seed=seed).y)
    high = _tv_mean(synthetic_data.synthetic_arrays(0.0, 5.0, seed=seed).y)
    assert high > low + 0.02, (seed, low, high)
    assert low > 0.5  # per-client W_k alone already skews labels


def test_deterministic():
  a = data.synthetic(1.0, 1.0, num_clients=5, seed=3)[0]
  b = data.synthetic(1.0, 1.0, num_clients=5, seed=3)[0]
  c = data.synthetic(1.0, 1.0, num_clients=5, seed=4)[0]
  np.testing.assert_array_equal(a.label_counts, b.label_counts)
  assert not np.array_equal(a.client_sizes, c.client_sizes)


@pytest.mark.parametrize('args,kwargs,match', [
    ((-1.0, 0.0), {}, 'alpha'), ((0.0, -0.5), {}, 'beta'), ((float('nan'), 0.0), {}, 'alpha'),
    ((0.0, 0.0), dict(num_clients=0), 'num_clients'), ((0.0, 0.0), dict(seed=-1), 'seed'),
])
def test_bad_input(args, kwargs, match):
  with pytest.raises(ValueError, match=match):
    data.synthetic(*args, **kwargs)
