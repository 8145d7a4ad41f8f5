"""Tests of `tfds_dirichlet` with tensorflow-datasets' mocks (never a download)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from tff_conflict import data


@pytest.mark.parametrize('name,shape,num_classes', [
    ('mnist', [28, 28, 1], 10), ('fashion_mnist', [28, 28, 1], 10),
    ('cifar10', [32, 32, 3], 10), ('cifar100', [32, 32, 3], 100),
])
def test_mocked_dataset(tmp_path, name, shape, num_classes):
  with tfds.testing.mock_data(num_examples=120):
    train, test = data.tfds_dirichlet(name, num_clients=4, alpha=0.5, seed=1,
                                      data_dir=str(tmp_path))
    raw_train = tfds.load(name, split='train', data_dir=str(tmp_path), download=False,
                          as_supervised=True)
    raw = list(raw_train.as_numpy_iterator())
  spec = collections.OrderedDict(x=tf.TensorSpec(shape, tf.float32), y=tf.TensorSpec([], tf.int32))
  assert train.element_type_structure == spec and test.element_type_structure == spec
  assert train.client_ids == test.client_ids == ['0', '1', '2', '3']
  assert train.client_sizes.sum() == 120 and train.client_sizes.min() >= 1
  assert test.client_sizes.sum() == 120 and test.client_sizes.min() >= 1
  assert train.label_counts.shape == (4, num_classes)
  pooled = list(train.create_tf_dataset_from_all_clients())
  xs = np.stack([e['x'].numpy() for e in pooled])
  assert xs.min() >= 0.0 and xs.max() <= 1.0
  # The same images as tfds gives, scaled by 1/255, with their labels.
  expected = sorted((bytes(np.round(x.astype(np.float32) / 255.0, 6)), int(y)) for x, y in raw)
  got = sorted((bytes(np.round(e['x'].numpy(), 6)), int(e['y'])) for e in pooled)
  assert got == expected


def test_not_prepared_fails_naming_dataset_and_data_dir(tmp_path, monkeypatch, network_attempts):
  downloads = []
  monkeypatch.setattr(tfds.core.DatasetBuilder, 'download_and_prepare',
                      lambda *args, **kwargs: downloads.append(args))
  monkeypatch.setattr(tfds.download.DownloadManager, 'download',
                      lambda *args, **kwargs: downloads.append(args))
  with pytest.raises(FileNotFoundError) as info:
    data.tfds_dirichlet('cifar10', num_clients=3, alpha=1.0, data_dir=str(tmp_path))
  assert downloads == [] and network_attempts == []
  assert "'cifar10'" in str(info.value) and str(tmp_path) in str(info.value)


@pytest.mark.parametrize('kwargs,match', [
    (dict(name='svhn'), 'name'), (dict(alpha=0.0), 'alpha'), (dict(num_clients=0), 'num_clients'),
    (dict(seed=-1), 'seed'),
])
def test_bad_input(tmp_path, kwargs, match):
  args = dict(name='mnist', num_clients=2, alpha=1.0, data_dir=str(tmp_path))
  args.update(kwargs)
  with pytest.raises(ValueError, match=match):
    data.tfds_dirichlet(args.pop('name'), **args)


def test_too_many_clients_for_the_test_split(tmp_path):
  with tfds.testing.mock_data(num_examples=10):
    with pytest.raises(ValueError, match='num_clients'):
      data.tfds_dirichlet('mnist', num_clients=11, alpha=1.0, data_dir=str(tmp_path))
