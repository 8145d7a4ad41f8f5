"""Tests of the package surface and `dataset_info`."""

import pytest

from tff_conflict import data


def test_every_public_name_resolves():
  for name in data.__all__:
    assert callable(getattr(data, name)), name


@pytest.mark.parametrize('name,loader', [
    ('digits', lambda: data.digits(num_clients=3)),
    ('synthetic', lambda: data.synthetic(0.0, 0.0, num_clients=3)),
])
def test_info_matches_loaded_elements(name, loader):
  info = data.dataset_info(name)
  train, _ = loader()
  assert tuple(train.element_type_structure['x'].shape) == info.element_shape
  assert train.label_counts.shape[1] == info.num_classes


def test_known_infos():
  assert data.dataset_info('emnist').num_classes == 62
  assert data.dataset_info('emnist_digits').num_classes == 10
  assert data.dataset_info('cifar100') == data.DatasetInfo(
      'cifar100', (32, 32, 3), 100, "tfds_dirichlet('cifar100', ...)")


def test_unknown_name():
  with pytest.raises(ValueError, match="'imagenet'"):
    data.dataset_info('imagenet')
