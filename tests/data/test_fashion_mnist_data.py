"""Fashion-MNIST from its IDX files: where they are looked for, the one-line error when they are
absent, damaged files named, the regimes over them, and (when installed) the real files."""

import os

import numpy as np
import pytest

from tff_conflict import data
from tff_conflict.data import fashion_mnist_data
from tff_conflict.data import regimes
from tests.data import idx_fixtures


@pytest.fixture(autouse=True)
def default_dirs(tmp_path, monkeypatch):
  """Debian's folder and the home directory (Keras's cache) moved under tmp_path, empty; the
  regimes' array cache cleared around each test."""
  debian, home = tmp_path / 'debian', tmp_path / 'home'
  monkeypatch.setattr(fashion_mnist_data, 'DEBIAN_DIR', str(debian))
  monkeypatch.setenv('HOME', str(home))
  regimes._stored_arrays.cache_clear()  # pylint: disable=protected-access
  yield debian, home / '.keras' / 'datasets' / 'fashion-mnist'
  regimes._stored_arrays.cache_clear()  # pylint: disable=protected-access


@pytest.mark.parametrize('compress', [True, False])
def test_reads_the_four_files(tmp_path, compress):
  written = idx_fixtures.fashion_mnist_dir(tmp_path / 'fm', compress=compress)
  loaded = fashion_mnist_data.load_arrays(tmp_path / 'fm')
  for (x, y), split in zip(loaded, ('train', 'test')):
    assert x.dtype == np.uint8 and x.shape == (len(written[split][1]), 28, 28, 1)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(x[..., 0], written[split][0])
    np.testing.assert_array_equal(y, written[split][1])


def test_data_dir_then_debian_then_keras(tmp_path, default_dirs):
  debian, keras = default_dirs
  labels = lambda directory: fashion_mnist_data.load_arrays(directory)[0][1]
  from_keras = idx_fixtures.fashion_mnist_dir(keras, seed=1)['train'][1]
  assert fashion_mnist_data.find_dir() == str(keras)
  np.testing.assert_array_equal(labels(None), from_keras)
  from_debian = idx_fixtures.fashion_mnist_dir(debian, seed=2)['train'][1]
  assert fashion_mnist_data.find_dir() == str(debian)
  np.testing.assert_array_equal(labels(None), from_debian)
  own = idx_fixtures.fashion_mnist_dir(tmp_path / 'own', seed=3)['train'][1]
  np.testing.assert_array_equal(labels(tmp_path / 'own'), own)
  with pytest.raises(FileNotFoundError):   # a data_dir given is the only place looked in
    fashion_mnist_data.load_arrays(tmp_path / 'elsewhere')


def test_absent_is_one_line_saying_how_to_get_it(tmp_path, default_dirs, network_attempts):
  for data_dir, where in ((tmp_path / 'none', f"data_dir='{tmp_path / 'none'}'"),
                          (None, f'{default_dirs[0]} or {default_dirs[1]}')):
    with pytest.raises(FileNotFoundError) as info:
      data.load_regime('fashion_mnist:dir(0.1)@10', data_dir=data_dir)
    message = str(info.value)
    assert '\n' not in message
    assert message.startswith(f'Fashion-MNIST is not in {where}: install it with '
                              '`apt-get install dataset-fashion-mnist`')
    assert 'tf.keras.datasets.fashion_mnist.load_data() on a machine that is online' in message
  assert network_attempts == []


def test_a_folder_lacking_a_file_names_it(tmp_path):
  idx_fixtures.fashion_mnist_dir(tmp_path / 'fm')
  os.remove(tmp_path / 'fm' / 't10k-labels-idx1-ubyte.gz')
  with pytest.raises(FileNotFoundError, match=f'{tmp_path / "fm"} lacks t10k-labels-idx1-ubyte.gz'):
    fashion_mnist_data.load_arrays(tmp_path / 'fm')


_IMAGES, _LABELS = 'train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'


@pytest.mark.parametrize('name, array, message', [
    (_IMAGES, np.zeros((60, 28, 27), np.uint8), 'expected uint8 images [N, 28, 28], got uint8 '
     '[60, 28, 27]'),
    (_IMAGES, np.zeros((60, 28, 28), np.int16), 'expected uint8 images [N, 28, 28], got int16'),
    (_LABELS, np.zeros((60, 1), np.uint8), 'expected uint8 labels [N], got uint8 [60, 1]'),
    (_LABELS, np.zeros(59, np.uint8), '59 labels for the 60 images of'),
    (_LABELS, np.full(60, 10, np.uint8), 'labels must be in 0..9, got 10 (example 0)'),
    (_IMAGES, np.zeros((0, 28, 28), np.uint8), 'no images'),
], ids=['width', 'dtype', 'labels_rank', 'count', 'label_10', 'empty'])
def test_wrong_content_is_refused_naming_the_file(tmp_path, name, array, message):
  idx_fixtures.fashion_mnist_dir(tmp_path / 'fm')   # 60 training images
  path = idx_fixtures.write_idx(tmp_path / 'fm' / name, array)
  with pytest.raises(data.IdxFormatError) as info:
    fashion_mnist_data.load_arrays(tmp_path / 'fm')
  assert str(info.value).startswith(str(tmp_path / 'fm')) and message in str(info.value)
  if name == _IMAGES:
    assert str(info.value).startswith(path)


def _pooled(client_data):
  items = [(e['x'].numpy(), int(e['y'])) for e in client_data.create_tf_dataset_from_all_clients()]
  return sorted((bytes(np.round(x, 6)), y) for x, y in items)


def _scaled(x, y):
  return sorted((bytes(np.round(x.astype(np.float32)[..., None] / 255.0, 6)), int(label))
                for x, label in zip(x, y))


@pytest.mark.parametrize('split', ['iid', 'dir(0.5)', '#C=2', 'qty(1)', 'client_dir(1)'])
def test_every_split_tests_on_the_whole_official_test_set(tmp_path, split):
  written = idx_fixtures.fashion_mnist_dir(tmp_path, train_per_class=20)
  for seed in (0, 1):
    train, test = data.load_regime(f'fashion_mnist:{split}@4', seed=seed, data_dir=str(tmp_path))
    assert train.client_ids == test.client_ids == ['0', '1', '2', '3']
    info = data.dataset_info('fashion_mnist')
    assert tuple(train.element_type_structure['x'].shape) == info.element_shape
    assert train.label_counts.shape[1] == info.num_classes
    assert _pooled(test) == _scaled(*written['test'])
    pooled, every = _pooled(train), _scaled(*written['train'])
    if split in ('#C=2', 'client_dir(1)'):   # these leave some training examples out
      assert set(pooled) < set(every) and len(set(pooled)) == len(pooled)
    else:
      assert pooled == every
  if split == '#C=2':
    assert (np.count_nonzero(train.label_counts, axis=1) <= 2).all()


def test_fashion_mnist_is_its_dirichlet_regime(tmp_path):
  idx_fixtures.fashion_mnist_dir(tmp_path, train_per_class=20)
  train, test = data.fashion_mnist(num_clients=5, alpha=0.5, seed=2, data_dir=str(tmp_path))
  same_train, same_test = data.load_regime('fashion_mnist:dir(0.5)@5', seed=2,
                                           data_dir=str(tmp_path))
  np.testing.assert_array_equal(train.label_counts, same_train.label_counts)
  np.testing.assert_array_equal(test.label_counts, same_test.label_counts)
  for client in train.client_ids:
    got = [int(e['y']) for e in train.create_tf_dataset_for_client(client)]
    assert got == [int(e['y']) for e in same_train.create_tf_dataset_for_client(client)]


@pytest.mark.parametrize('kwargs, argument', [
    (dict(num_clients=0), 'num_clients'), (dict(alpha=0.0), 'alpha'), (dict(seed=-1), 'seed'),
    (dict(num_clients=31), 'num_clients'),   # more clients than the 30 test images
])
def test_bad_arguments_are_named(tmp_path, kwargs, argument):
  idx_fixtures.fashion_mnist_dir(tmp_path)
  with pytest.raises(ValueError, match=argument) as info:
    data.fashion_mnist(data_dir=str(tmp_path), **{'num_clients': 3, **kwargs})
  assert getattr(info.value, 'argument', None) == argument


def test_the_real_files(monkeypatch):
  """The installed data set (`apt-get install dataset-fashion-mnist`), as Zalando released it."""
  monkeypatch.undo()   # the real Debian folder and home directory
  try:
    directory = fashion_mnist_data.find_dir()
  except FileNotFoundError:
    pytest.skip('Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)')
  (x_train, y_train), (x_test, y_test) = fashion_mnist_data.load_arrays(directory)
  assert x_train.shape == (60000, 28, 28, 1) and x_test.shape == (10000, 28, 28, 1)
  assert (np.bincount(y_train) == 6000).all() and (np.bincount(y_test) == 1000).all()
  assert y_train[:10].tolist() == [9, 0, 0, 3, 0, 2, 7, 2, 5, 5]
  assert y_test[:10].tolist() == [9, 2, 1, 1, 6, 1, 4, 6, 5, 7]
  assert x_train.min() == 0 and x_train.max() == 255
