"""Regime names (NIID-Bench's splits, Synthetic, EMNIST's writers) and what they load."""

import numpy as np
import pytest

from tff_conflict import data
from tff_conflict.data import regimes
from tests.data import leaf_fixtures
from tests.data import test_emnist_data


def _pooled(client_data):
  xs, ys = [], []
  for batch in client_data.create_tf_dataset_from_all_clients().batch(4096):
    xs.append(batch['x'].numpy())
    ys.append(batch['y'].numpy())
  return np.concatenate(xs), np.concatenate(ys)


@pytest.mark.parametrize('text,name,slug', [
    ('digits:iid', 'digits:iid', 'digits_iid'),
    ('digits:dir(0.10)', 'digits:dir(0.1)', 'digits_dir_0.1'),
    ('digits: dir( 1 )', 'digits:dir(1)', 'digits_dir_1'),
    ('digits:#C=2', 'digits:#C=2', 'digits_C2'),
    ('digits:qty(0.5)@100', 'digits:qty(0.5)@100', 'digits_qty_0.5_100'),
    ('synthetic(1,1)', 'synthetic(1,1)', 'synthetic_1_1'),
    ('synthetic( 0.5 , 0.5 )', 'synthetic(0.5,0.5)', 'synthetic_0.5_0.5'),
    ('synthetic(0,0)@10', 'synthetic(0,0)@10', 'synthetic_0_0_10'),
    ('emnist:natural', 'emnist:natural', 'emnist_natural'),
    ('mnist:dir(0.5)', 'mnist:dir(0.5)', 'mnist_dir_0.5'),
    ('digits:client_dir( 0.50 )@10', 'digits:client_dir(0.5)@10', 'digits_client_dir_0.5_10'),
    ('leaf_femnist:natural@100', 'leaf_femnist:natural@100', 'leaf_femnist_natural_100'),
])
def test_names_round_trip(text, name, slug):
  regime = data.parse_regime(text)
  assert regime.name == name and str(regime) == name
  assert regime.slug == slug
  assert data.parse_regime(name) == regime


@pytest.mark.parametrize('text,match', [
    ('digits', 'must be DATASET:SPLIT'),
    ('cats:iid', 'must be DATASET:SPLIT'),
    ('digits:dirichlet(0.1)', 'the split must be'),
    ('digits:dir(0)', 'concentration must be > 0'),
    ('digits:client_dir(0)', 'concentration must be > 0'),
    ('emnist:client_dir(1)', 'keeps its own clients'),
    ('digits:#C=11', r'#C=K needs K in 1..10'),
    ('digits:#C=0', r'#C=K needs K in 1..10'),
    ('digits:natural', 'no natural clients'),
    ('emnist:dir(0.1)', 'keeps its own clients'),
    ('leaf_celeba:iid', 'keeps its own clients'),
    ('digits:iid@0', 'population after "@"'),
    ('synthetic(1)', 'must be DATASET:SPLIT'),
])
def test_bad_names_are_clear_errors(text, match):
  with pytest.raises(ValueError, match=match):
    data.parse_regime(text)


def test_digits_dirichlet_regime_is_data_digits():
  for alpha, seed in ((0.1, 0), (0.5, 3)):
    got = data.load_regime(data.parse_regime(f'digits:dir({alpha})'), seed=seed)
    expected = data.digits(alpha=alpha, seed=seed)
    for a, b in zip(got, expected):
      np.testing.assert_array_equal(a.label_counts, b.label_counts)
      for pa, pb in zip(a.partition, b.partition):
        np.testing.assert_array_equal(pa, pb)


@pytest.mark.parametrize('name', ['digits:iid', 'digits:#C=2', 'digits:qty(0.5)',
                                  'digits:dir(1)@40'])
def test_array_regimes_keep_the_whole_test_split(name):
  regime = data.parse_regime(name)
  train, test = data.load_regime(regime, seed=1)
  num_clients = regime.num_clients or 20
  assert len(train.client_ids) == len(test.client_ids) == num_clients
  assert train.client_ids == test.client_ids
  reference_train, reference_test = data.digits(seed=1)
  _, y = _pooled(test)
  _, y_reference = _pooled(reference_test)
  np.testing.assert_array_equal(np.sort(y), np.sort(y_reference))  # the same 359 examples
  assert train.client_sizes.sum() == reference_train.client_sizes.sum()
  assert (train.client_sizes > 0).all()


def test_each_split_has_its_defining_property():
  iid, _ = data.load_regime('digits:iid', seed=0)
  assert iid.client_sizes.max() - iid.client_sizes.min() <= 1
  pathological, _ = data.load_regime('digits:#C=2', seed=0)
  assert ((pathological.label_counts > 0).sum(axis=1) == 2).all()
  quantity, _ = data.load_regime('digits:qty(0.5)', seed=0)
  assert quantity.client_sizes.min() >= 10
  assert quantity.client_sizes.std() > 5 * iid.client_sizes.std()
  summary = data.describe(quantity)
  assert summary['label_tv_distance']['median'] < 0.35  # labels about IID


def test_client_dirichlet_regime_has_equal_clients_and_the_whole_test_split():
  train, test = data.load_regime('digits:client_dir(0.5)', seed=2)
  assert len(set(train.client_sizes.tolist())) == 1 and train.client_sizes[0] > 0
  assert train.client_ids == test.client_ids and len(train.client_ids) == 20
  _, reference_test = data.digits(seed=2)
  assert test.client_sizes.sum() == reference_test.client_sizes.sum()
  again, _ = data.load_regime('digits:client_dir(0.5)', seed=2)
  np.testing.assert_array_equal(again.label_counts, train.label_counts)
  other, _ = data.load_regime('digits:client_dir(0.5)', seed=3)
  assert not np.array_equal(other.label_counts, train.label_counts)
  iid, _ = data.load_regime('digits:iid', seed=2)
  assert data.describe(train)['label_tv_distance']['median'] > 2 * data.describe(iid)[
      'label_tv_distance']['median']


def _rows(x, y):
  """Each example as one hashable row (its features, then its label)."""
  flat = np.concatenate([x.reshape(len(x), -1).astype(np.float64), y[:, None]], axis=1)
  return {row.tobytes() for row in flat}


@pytest.mark.parametrize('name', ['digits:dir(0.1)', 'digits:#C=2', 'synthetic(1,1)',
                                  'digits:iid@40'])
def test_the_test_split_is_fixed_across_seeds_and_never_in_the_training_pool(name):
  tests, pools = [], []
  for seed in (0, 1, 2, 100):
    train, test = data.load_regime(data.parse_regime(name), seed=seed)
    x_test, y_test = _pooled(test)
    order = np.lexsort(np.concatenate([x_test.reshape(len(x_test), -1), y_test[:, None]],
                                      axis=1).T)
    tests.append((x_test[order], y_test[order]))
    pools.append(train.label_counts)
    assert not _rows(x_test, y_test) & _rows(*_pooled(train)), f'seed {seed}: a test example trains'
  for x, y in tests[1:]:
    np.testing.assert_array_equal(x, tests[0][0])
    np.testing.assert_array_equal(y, tests[0][1])
  assert not np.array_equal(pools[0], pools[1])  # the seeds do vary the training clients


def test_leaf_and_emnist_test_splits_do_not_depend_on_the_seed(tmp_path):
  leaf_fixtures.synthetic(str(tmp_path / 'leaf'), num_users=4, dim=60, num_classes=5)
  leaf_dir = str(tmp_path / 'leaf' / 'data' / 'synthetic')
  test_emnist_data._write_db(str(tmp_path / 'emnist_all.sqlite'))  # pylint: disable=protected-access
  for name, kwargs in (('leaf_synthetic:natural', dict(leaf_dir=leaf_dir)),
                       ('emnist:natural', dict(cache_dir=str(tmp_path)))):
    pooled = [_pooled(data.load_regime(name, seed=s, **kwargs)[1]) for s in (0, 100)]
    assert len(pooled[0][1]) == len(pooled[1][1]) > 0  # (TFF pools the clients in any order)
    assert _rows(*pooled[0]) == _rows(*pooled[1])


def test_synthetic_regime_is_data_synthetic():
  got_train, _ = data.load_regime('synthetic(0.5,0.5)@12', seed=2)
  expected_train, _ = data.synthetic(0.5, 0.5, num_clients=12,
                                     seed=regimes.SYNTHETIC_DATA_SEED, train_seed=2)
  np.testing.assert_array_equal(got_train.label_counts, expected_train.label_counts)
  for cid in expected_train.client_ids:
    got = next(iter(got_train.create_tf_dataset_for_client(cid).batch(10000)))
    expected = next(iter(expected_train.create_tf_dataset_for_client(cid).batch(10000)))
    np.testing.assert_array_equal(got['x'].numpy(), expected['x'].numpy())


def test_emnist_natural_keeps_writers_and_first_k(tmp_path):
  test_emnist_data._write_db(str(tmp_path / 'emnist_all.sqlite'))  # pylint: disable=protected-access
  train, test = data.load_regime('emnist:natural', cache_dir=str(tmp_path))
  assert sorted(train.client_ids) == ['w0', 'w1', 'w2']
  train, test = data.load_regime('emnist:natural@2', cache_dir=str(tmp_path))
  assert train.client_ids == ['w0', 'w1']
  assert test.client_ids == ['w0', 'w1']   # the same writers' test examples


def test_population_larger_than_the_test_split_is_refused():
  with pytest.raises(ValueError, match='num_clients must be at most 359'):
    data.load_regime('digits:iid@400')


def test_metadata():
  regime = data.parse_regime('digits:#C=3')
  assert regimes.num_classes(regime) == 10


def test_leaf_natural_keeps_the_files_users(tmp_path):
  leaf_fixtures.synthetic(str(tmp_path), num_users=4, dim=60, num_classes=5)
  leaf_dir = str(tmp_path / 'data' / 'synthetic')
  train, test = data.load_regime('leaf_synthetic:natural', leaf_dir=leaf_dir)
  expected_train, _ = data.leaf(leaf_dir)
  assert train.client_ids == expected_train.client_ids and len(train.client_ids) == 4
  assert train.info.element_shape == (60,)
  first, first_test = data.load_regime('leaf_synthetic:natural@2', leaf_dir=leaf_dir)
  assert first.client_ids == expected_train.client_ids[:2]
  assert first_test.client_ids == first.client_ids  # a sample split: the same users' test
  assert first.info == expected_train.info
  with pytest.raises(ValueError, match='needs leaf_dir'):
    data.load_regime('leaf_synthetic:natural')
  with pytest.raises(ValueError):
    regimes.num_classes(data.parse_regime('leaf_synthetic:natural'))  # the files tell


def test_a_tfds_dataset_with_every_array_split(tmp_path):
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  regimes._stored_arrays.cache_clear()  # pylint: disable=protected-access
  with tfds.testing.mock_data(num_examples=200):
    for name in ('cifar10:iid@4', 'cifar10:#C=2@4', 'cifar10:qty(1)@4', 'cifar10:dir(0.5)@4'):
      train, test = data.load_regime(name, seed=1, data_dir=str(tmp_path))
      assert train.client_ids == test.client_ids and len(train.client_ids) == 4
      assert train.client_sizes.sum() <= 200 and test.client_sizes.sum() == 200
      if '#C=2' in name:
        assert ((train.label_counts > 0).sum(axis=1) == 2).all()
    # The dataset's own test split, whatever the seed.
    pooled = [_pooled(data.load_regime('cifar10:dir(0.5)@4', seed=s, data_dir=str(tmp_path))[1])
              for s in (0, 7)]
    assert _rows(*pooled[0]) == _rows(*pooled[1]) and len(pooled[0][1]) == 200
  regimes._stored_arrays.cache_clear()  # pylint: disable=protected-access
