"""`data.leaf(name='shakespeare')` on the files tools/shakespeare_leaf.py writes: LEAF's character
ids, unknown characters, bad files, `first_users` and the `leaf_shakespeare:natural` regimes."""

import json
import math
import os

import numpy as np
import pytest
import tensorflow as tf

import tff_conflict
from tff_conflict import data
from tff_conflict.data import leaf_cache
from tff_conflict.data import leaf_data
from tests.data import leaf_fixtures

LETTERS = leaf_cache.SHAKESPEARE_LETTERS


def _ids(text):
  return [LETTERS.index(c) if c in LETTERS else 79 for c in text]


def _read(client_data, user):
  examples = list(client_data.create_tf_dataset_for_client(user))
  return (np.array([e['x'].numpy() for e in examples]).reshape(-1, 80),
          np.array([e['y'].numpy() for e in examples]))


@pytest.fixture(name='folder')
def fixture_folder(tmp_path):
  return leaf_fixtures.shakespeare(str(tmp_path))[0]


def test_leafs_letters():
  # LEAF's models/utils/language_utils.py ALL_LETTERS, 80 of them, '}' last.
  assert len(LETTERS) == len(set(LETTERS)) == 80 and LETTERS[0] == '\n' and LETTERS[-1] == '}'
  np.testing.assert_array_equal(leaf_cache.char_ids('a\n}$\u2014 A'),
                                [LETTERS.index('a'), 0, 79, 79, 79, 1, LETTERS.index('A')])


def test_examples_are_leafs_character_ids(folder):
  train, test = data.leaf(folder)  # the folder's name tells the dataset
  assert train.name == 'shakespeare' and train.split_kind == 'sample'
  assert train.element_type_structure['x'] == tf.TensorSpec((80,), tf.int32)
  assert train.element_type_structure['y'] == tf.TensorSpec([], tf.int32)
  assert train.info == data.dataset_info('leaf_shakespeare') == data.DatasetInfo(
      'leaf_shakespeare', (80,), 80, "leaf(root, name='shakespeare')")
  assert train.client_ids == ['a_test_play_HAMLET', 'a_test_play_HORATIO', 'macbeth_FIRST_WITCH']
  for split, client_data in (('train', train), ('test', test)):
    expected = leaf_fixtures.shakespeare_split(folder, split)
    for k, user in enumerate(client_data.client_ids):
      x, y = _read(client_data, user)
      np.testing.assert_array_equal(x, [_ids(s) for s in expected[user][0]])
      np.testing.assert_array_equal(y, _ids(''.join(expected[user][1])))
      np.testing.assert_array_equal(client_data.label_counts[k], np.bincount(y, minlength=80))
  # HAMLET's '$', near the end of his text (test), is outside LEAF's letters: id 79 in x and y.
  x, y = _read(test, 'a_test_play_HAMLET')
  assert (x == 79).any() and (y == 79).sum() == 1
  assert data.leaf(os.path.dirname(os.path.dirname(folder)), name='shakespeare')[
      0].client_ids == train.client_ids  # LEAF's checkout layout


def test_a_keras_character_model_trains_on_it(folder):
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  train, _ = data.leaf(folder)
  model = models.shakespeare_gru((80,), 80)
  model.compile(tf.keras.optimizers.SGD(0.1),
                tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  batches = train.create_tf_dataset_for_client('a_test_play_HAMLET').map(
      lambda e: (e['x'], e['y'])).batch(16)
  history = model.fit(batches, epochs=2, verbose=0)
  assert np.isfinite(history.history['loss']).all()


def test_tunings_validation_split_keeps_the_character_ids(folder):
  train, _ = data.leaf(folder)
  fit, validation = data.split_validation(train, 0.2, seed=0)
  x, y = _read(train, 'a_test_play_HORATIO')
  fit_x, fit_y = _read(fit, 'a_test_play_HORATIO')
  val_x, val_y = _read(validation, 'a_test_play_HORATIO')
  assert fit.element_type_structure['x'].dtype == tf.int32 and len(val_y) == 7
  assert sorted(map(tuple, np.concatenate([fit_x, val_x]))) == sorted(map(tuple, x))
  assert sorted(np.concatenate([fit_y, val_y])) == sorted(y)


@pytest.mark.parametrize('corrupt, message', [
    (lambda u: u['x'].__setitem__(0, u['x'][0][:79]), 'holds a string of 79 characters'),
    (lambda u: u['y'].__setitem__(0, 'ab'), "must be single characters, got 'ab'"),
    (lambda u: u['y'].__setitem__(0, 3), r'must be a list of strings \(characters\)'),
    (lambda u: u['x'].__setitem__(0, 7), r'must be a list of strings \(text\)'),
])
def test_bad_files_are_errors_naming_the_file(folder, corrupt, message):
  [path] = [os.path.join(folder, 'data', 'train', f)
            for f in os.listdir(os.path.join(folder, 'data', 'train'))]
  with open(path, encoding='utf-8') as f:
    content = json.load(f)
  corrupt(content['user_data']['a_test_play_HORATIO'])
  with open(path, 'w', encoding='utf-8') as f:
    json.dump(content, f)
  with pytest.raises(data.LeafFormatError, match=message) as info:
    data.leaf(folder)
  assert path in str(info.value)


def test_first_users_thins_evenly_and_keeps_the_split_proportion(folder):
  train, test = data.leaf(folder)
  sizes = dict(zip(train.client_ids, train.client_sizes.tolist()))
  test_sizes = dict(zip(test.client_ids, test.client_sizes.tolist()))
  small_train, small_test = data.first_users(train, test, num_clients=2, max_examples=20)
  assert small_train.client_ids == small_test.client_ids == train.client_ids[:2]
  assert isinstance(small_train, data.LeafClientData) and small_train.info == train.info
  expected = leaf_fixtures.shakespeare_split(folder, 'train')
  expected_test = leaf_fixtures.shakespeare_split(folder, 'test')
  for k, user in enumerate(small_train.client_ids):
    n, m = sizes[user], min(sizes[user], 20)
    positions = [i * n // m for i in range(m)]
    x, y = _read(small_train, user)
    np.testing.assert_array_equal(x, [_ids(expected[user][0][i]) for i in positions])
    np.testing.assert_array_equal(y, [_ids(expected[user][1][i])[0] for i in positions])
    np.testing.assert_array_equal(small_train.label_counts[k], np.bincount(y, minlength=80))
    kept_test = max(1, math.ceil(test_sizes[user] * min(1, 20 / n)))
    assert small_test.client_sizes[k] == kept_test == len(_read(small_test, user)[1])
    test_positions = leaf_data.kept_positions(test_sizes[user], kept_test)
    np.testing.assert_array_equal(_read(small_test, user)[0],
                                  [_ids(expected_test[user][0][i]) for i in test_positions])
  assert small_train.client_sizes.tolist() == [20, 20]
  # Without a cap the users keep everything; without num_clients every user stays.
  whole, _ = data.first_users(train, test, num_clients=1)
  assert whole.client_sizes.tolist() == [sizes['a_test_play_HAMLET']]
  capped, _ = data.first_users(train, test, max_examples=5)
  assert capped.client_ids == train.client_ids and capped.client_sizes.tolist() == [5, 5, 5]


def test_a_test_cap_keeps_that_many_test_examples_per_user_whatever_its_training_cap(folder):
  train, test = data.leaf(folder)
  test_sizes = dict(zip(test.client_ids, test.client_sizes.tolist()))
  expected_test = leaf_fixtures.shakespeare_split(folder, 'test')
  small_train, small_test = data.first_users(train, test, num_clients=2, max_examples=3,
                                             max_test_examples=4)
  assert small_train.client_sizes.tolist() == [3, 3]
  for k, user in enumerate(small_test.client_ids):
    kept = min(test_sizes[user], 4)
    assert small_test.client_sizes[k] == kept
    positions = leaf_data.kept_positions(test_sizes[user], kept)
    np.testing.assert_array_equal(_read(small_test, user)[0],
                                  [_ids(expected_test[user][0][i]) for i in positions])
  # Alone, the test cap leaves the training examples whole.
  whole, capped_test = data.first_users(train, test, max_test_examples=1)
  np.testing.assert_array_equal(whole.client_sizes, train.client_sizes)
  assert capped_test.client_sizes.tolist() == [1] * len(test.client_ids)


def test_first_users_refuses_bad_arguments(folder):
  train, test = data.leaf(folder)
  for kwargs, argument, value in ((dict(num_clients=4), 'num_clients', 4),
                                  (dict(max_examples=0), 'max_examples', 0),
                                  (dict(max_test_examples=0), 'max_test_examples', 0),
                                  (dict(num_clients=1.5), 'num_clients', 1.5)):
    with pytest.raises(tff_conflict.ArgumentError) as info:
      data.first_users(train, test, **kwargs)
    assert (info.value.argument, info.value.value) == (argument, value)
  with pytest.raises(tff_conflict.ArgumentError, match="'nobody' is not a client"):
    train.select({'nobody': 3})


def test_regimes_name_the_population_and_the_cap(folder):
  regime = data.parse_regime('leaf_shakespeare:natural(max=20)@2')
  assert (regime.dataset, regime.split, regime.param, regime.num_clients) == (
      'leaf_shakespeare', 'natural', (20,), 2)
  assert regime.name == 'leaf_shakespeare:natural(max=20)@2'
  assert data.parse_regime(' leaf_shakespeare:natural( max = 20 )@2').name == regime.name
  assert regime.slug == 'leaf_shakespeare_natural_max=20_2'
  assert data.parse_regime('leaf_shakespeare:natural').param == ()
  train, test = data.load_regime(regime, leaf_dir=folder)
  expected_train, expected_test = data.first_users(*data.leaf(folder), num_clients=2,
                                                   max_examples=20)
  assert train.client_ids == expected_train.client_ids and test.client_ids == train.client_ids
  np.testing.assert_array_equal(train.client_sizes, expected_train.client_sizes)
  np.testing.assert_array_equal(test.client_sizes, expected_test.client_sizes)
  capped = data.parse_regime('leaf_shakespeare:natural(max=20, test=2)@2')
  assert capped.param == (20, 2) and capped.name == 'leaf_shakespeare:natural(max=20,test=2)@2'
  assert data.parse_regime(capped.name) == capped
  _, capped_test = data.load_regime(capped, leaf_dir=folder)
  _, expected_test = data.first_users(*data.leaf(folder), num_clients=2, max_examples=20,
                                      max_test_examples=2)
  np.testing.assert_array_equal(capped_test.client_sizes, expected_test.client_sizes)
  everything, _ = data.load_regime('leaf_shakespeare:natural', leaf_dir=folder)
  assert everything.client_ids == data.leaf(folder)[0].client_ids
  for text, message in (('emnist:natural(max=5)', 'applies to the LEAF datasets'),
                        ('leaf_shakespeare:natural(max=0)', 'needs N >= 1'),
                        ('leaf_shakespeare:natural(max=5,test=0)', 'T >= 1'),
                        ('leaf_shakespeare:natural(test=5)', 'natural\\(max=N\\[,test=T\\]\\)'),
                        ('leaf_shakespeare:natural(5)', 'natural or \\(LEAF\\) natural\\(max=N')):
    with pytest.raises(tff_conflict.ArgumentError, match=message) as info:
      data.parse_regime(text)
    assert info.value.argument == 'regime'
