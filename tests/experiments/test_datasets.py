"""experiments.datasets: the `leaf` entry (LEAF's splits, --num_clients, classes and default
models), fashion_mnist's IDX files (--data_dir), and loader errors attributed to the setting that
points at the data."""

import pytest

from experiments import config
from experiments import datasets
from tests.data import idx_fixtures
from tests.data import leaf_fixtures


def _options(leaf_dir, **kwargs):
  return config.DataConfig(dataset='leaf', leaf_dir=leaf_dir, **kwargs)


@pytest.mark.parametrize('make, name, model, num_classes', [
    (leaf_fixtures.femnist, 'femnist', 'leaf_femnist_cnn', 62),
    (leaf_fixtures.synthetic, 'synthetic', 'logistic_regression', None),
    (leaf_fixtures.celeba, 'celeba', 'leaf_celeba_cnn', 2),
])
def test_leaf_datasets_get_leafs_models(tmp_path, make, name, model, num_classes):
  _, expected = make(str(tmp_path))
  options = _options(str(tmp_path / 'data' / name))
  train, test = datasets.load(options)
  assert train.client_ids == sorted(expected['train'])
  assert test.client_ids == sorted(expected['test'])
  assert datasets.default_model(options) == model
  assert datasets.num_classes(options) == (num_classes or train.num_classes)


def test_num_clients_keeps_the_first_users(tmp_path):
  leaf_fixtures.femnist(str(tmp_path / 'sample'), num_users=5)
  options = _options(str(tmp_path / 'sample' / 'data' / 'femnist'), num_clients=2)
  train, test = datasets.load(options)
  assert train.client_ids == test.client_ids == ['f0000_00', 'f0001_01']
  leaf_fixtures.femnist(str(tmp_path / 'user'), num_users=6, split='user')
  options = _options(str(tmp_path / 'user' / 'data' / 'femnist'), num_clients=2)
  train, test = datasets.load(options)
  assert train.client_ids == ['f0000_00', 'f0002_02']
  assert test.client_ids == ['f0001_01', 'f0003_03', 'f0005_05']  # every test user
  with pytest.raises(config.ConfigError, match='at most the 3 users of LEAF femnist') as info:
    datasets.load(config.DataConfig(dataset='leaf', leaf_dir=options.leaf_dir, num_clients=4))
  assert (info.value.argument, info.value.value) == ('num_clients', 4)


def test_load_attributes_loader_errors_to_the_setting_that_points_at_the_data(tmp_path):
  missing = str(tmp_path / 'no_leaf')
  with pytest.raises(config.ConfigError) as info:
    datasets.load(config.DataConfig(dataset='leaf', leaf_dir=missing))
  assert (info.value.argument, info.value.value) == ('leaf_dir', missing)
  assert info.value.flag_message().startswith(f'--leaf_dir={missing}: ')
  assert 'does not exist' in info.value.flag_message()
  with pytest.raises(config.ConfigError) as info:   # the loader's error about --num_clients
    datasets.load(config.DataConfig(num_clients=100000))
  assert (info.value.argument, info.value.value) == ('num_clients', 100000)
  assert info.value.flag_message() == ('--num_clients must be at most 359 (one held-out example '
                                       'per client), got 100000')


def test_fashion_mnist_reads_data_dir_and_names_it_when_absent(tmp_path):
  idx_fixtures.fashion_mnist_dir(tmp_path / 'fm', train_per_class=10)
  options = config.DataConfig(dataset='fashion_mnist', data_dir=str(tmp_path / 'fm'),
                              num_clients=4, alpha=0.5, data_seed=1)
  train, test = datasets.load(options)
  assert train.client_ids == test.client_ids == ['0', '1', '2', '3']
  assert train.client_sizes.sum() == 100 and test.client_sizes.sum() == 30
  missing = str(tmp_path / 'none')
  with pytest.raises(config.ConfigError) as info:
    datasets.load(config.DataConfig(dataset='fashion_mnist', data_dir=missing))
  assert (info.value.argument, info.value.value) == ('data_dir', missing)
  message = info.value.flag_message()
  assert message.startswith(f"--data_dir={missing}: Fashion-MNIST is not in data_dir='{missing}'")
  assert '`apt-get install dataset-fashion-mnist`' in message and '\n' not in message


@pytest.mark.parametrize('options, classes, model', [
    (config.DataConfig(), 10, 'digits_cnn'),
    (config.DataConfig(dataset='emnist'), 62, 'emnist_cnn'),
    (config.DataConfig(dataset='emnist', emnist_only_digits=True), 10, 'emnist_cnn'),
    (config.DataConfig(dataset='cifar100'), 100, 'cifar_cnn'),
    (config.DataConfig(dataset='fashion_mnist'), 10, 'small_mlp'),
    (config.DataConfig(dataset='mnist'), 10, 'fedavg_cnn'),
])
def test_classes_and_default_model_follow_the_dataset(options, classes, model):
  assert (datasets.num_classes(options), datasets.default_model(options)) == (classes, model)
