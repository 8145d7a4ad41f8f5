"""`data.leaf`: LEAF's JSON files as ClientData, the cache, and every kind of bad input."""

import glob
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import tff_conflict
from tff_conflict import data
from tff_conflict.data import leaf_cache
from tff_conflict.data import leaf_json
from tests.data import leaf_fixtures


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
  """Chunks of a few hundred bytes, so rows and users straddle chunk boundaries."""
  monkeypatch.setattr(leaf_json, 'CHUNK_BYTES', 300)


def _assert_split_equal(client_data, expected):
  got = leaf_fixtures.read_split(client_data)
  assert sorted(got) == sorted(expected) == client_data.client_ids
  for cid, (x, y) in expected.items():
    np.testing.assert_array_equal(got[cid][0], x)
    np.testing.assert_array_equal(got[cid][1], y)


def _no_cache_left(data_dir):
  return not glob.glob(os.path.join(data_dir, leaf_cache.DEFAULT_CACHE_NAME + '*[!k]'))


def test_femnist_sample_split_is_read_exactly(tmp_path):
  # Writer 0 has a single example: LEAF's sample split drops it, leaving empty entries.
  data_dir, expected = leaf_fixtures.femnist(str(tmp_path), sizes=[1, 2, 5, 3, 6, 4])
  train, test = data.leaf(str(tmp_path / 'data' / 'femnist'))
  _assert_split_equal(train, expected['train'])
  _assert_split_equal(test, expected['test'])
  assert 'f0000_00' not in train.client_ids and len(train.client_ids) == 5
  assert train.split_kind == test.split_kind == 'sample'
  assert train.element_type_structure['x'] == tf.TensorSpec((28, 28, 1), tf.float32)
  assert train.element_type_structure['y'] == tf.TensorSpec([], tf.int32)
  assert train.info == data.dataset_info('leaf_femnist') == data.DatasetInfo(
      'leaf_femnist', (28, 28, 1), 62, "leaf(root, name='femnist')")
  counts = np.stack([np.bincount(expected['train'][c][1], minlength=62) for c in train.client_ids])
  np.testing.assert_array_equal(train.label_counts, counts)
  np.testing.assert_array_equal(train.client_sizes, counts.sum(axis=1))
  summary = data.describe(train)
  assert summary['split'].startswith('sample-based')
  assert data_dir in summary['dataset']
  assert summary['num_clients'] == 5 and summary['num_examples'] == counts.sum()
  assert data.describe(test)['num_examples'] == sum(len(y) for _, y in expected['test'].values())
  # Pixel bytes k stand for k / 255: the cache holds one byte per value.
  assert os.path.getsize(os.path.join(train.cache_path, 'train', '0000001.bin')) == (
      expected['train'][train.client_ids[0]][1].size * (784 + 4))


def test_all_clients_and_dataset_computation_read_the_same_examples(tmp_path):
  _, expected = leaf_fixtures.femnist(str(tmp_path), num_users=4)
  train, _ = data.leaf(str(tmp_path / 'data' / 'femnist'))
  pooled = list(train.create_tf_dataset_from_all_clients().as_numpy_iterator())
  assert len(pooled) == sum(len(y) for _, y in expected['train'].values())
  cid = train.client_ids[2]
  via_tff = list(train.dataset_computation(cid).as_numpy_iterator())
  np.testing.assert_array_equal(np.stack([e['x'] for e in via_tff]), expected['train'][cid][0])


def test_values_that_are_not_k_over_255_are_stored_as_float32(tmp_path):
  rng = np.random.default_rng(1)
  per_user = {}
  for k, quantized in enumerate([True, False, 'mixed']):
    x, y, _ = leaf_fixtures.femnist_examples(rng, 8, quantized=quantized is True)
    if quantized == 'mixed':  # the first rows are k/255, a later one is not (converted midway)
      x = (rng.integers(0, 256, (8, 784)) / 255).tolist()
      x[6][100] = 0.123456789
    per_user[f'u{k}'] = (x, y, np.asarray(x, np.float32).reshape(8, 28, 28, 1))
  data_dir = str(tmp_path / 'femnist' / 'data')
  expected = leaf_fixtures.write_dataset(data_dir, 'all_data', per_user)
  train, test = data.leaf(str(tmp_path / 'femnist'))
  _assert_split_equal(train, expected['train'])
  _assert_split_equal(test, expected['test'])
  with np.load(os.path.join(train.cache_path, 'index.npz')) as index:
    assert index['train_encodings'].tolist() == [leaf_cache.UNIT8, leaf_cache.FLOAT32,
                                                 leaf_cache.FLOAT32]


def test_user_split_is_detected(tmp_path):
  _, expected = leaf_fixtures.femnist(str(tmp_path), num_users=5, split='user')
  train, test = data.leaf(str(tmp_path / 'data' / 'femnist' / 'data'), name='femnist')
  assert train.split_kind == 'user' and not set(train.client_ids) & set(test.client_ids)
  _assert_split_equal(test, expected['test'])
  assert data.describe(test)['split'].startswith('user-based')


def test_synthetic_keeps_its_dimension_and_classes(tmp_path):
  _, expected = leaf_fixtures.synthetic(str(tmp_path), dim=60, num_classes=5)
  train, test = data.leaf(str(tmp_path / 'data' / 'synthetic'))
  _assert_split_equal(train, expected['train'])
  _assert_split_equal(test, expected['test'])
  assert train.info.element_shape == (60,)
  all_labels = np.concatenate([y for split in expected.values() for _, y in split.values()])
  assert train.num_classes == all_labels.max() + 1
  assert train.client_ids == sorted(train.client_ids)


def test_celeba_images_are_resized_as_leaf_does(tmp_path):
  data_dir, expected = leaf_fixtures.celeba(str(tmp_path))
  train, test = data.leaf(str(tmp_path / 'data' / 'celeba'))
  _assert_split_equal(train, expected['train'])
  _assert_split_equal(test, expected['test'])
  assert train.info == data.dataset_info('leaf_celeba')
  assert train.info.element_shape == (84, 84, 3) and train.num_classes == 2
  # An image changed in place: the cache is rebuilt from it.
  image_dir = os.path.join(data_dir, 'raw', 'img_align_celeba')
  first = sorted(os.listdir(image_dir))[0]
  from PIL import Image  # pylint: disable=g-import-not-at-top
  Image.fromarray(np.zeros((36, 44, 3), np.uint8)).save(os.path.join(image_dir, first))
  train, _ = data.leaf(str(tmp_path / 'data' / 'celeba'))
  user = next(u for u in sorted(expected['train']) if u in train.client_ids)
  x, _ = leaf_fixtures.read_split(train)[user]
  np.testing.assert_array_equal(x[0], np.zeros((84, 84, 3), np.float32))


def test_celeba_missing_image_is_named(tmp_path):
  data_dir, _ = leaf_fixtures.celeba(str(tmp_path))
  image_dir = os.path.join(data_dir, 'raw', 'img_align_celeba')
  os.remove(os.path.join(image_dir, '000002.jpg'))
  with pytest.raises(FileNotFoundError, match="image '000002.jpg' of user '1000' is not in"):
    data.leaf(str(tmp_path / 'data' / 'celeba'))
  shutil.rmtree(image_dir)
  with pytest.raises(FileNotFoundError, match='img_align_celeba'):
    data.leaf(str(tmp_path / 'data' / 'celeba'))
  with pytest.raises(FileNotFoundError, match="image '000001.jpg'"):
    data.leaf(str(tmp_path / 'data' / 'celeba'), image_dir=str(tmp_path))


def test_second_call_opens_the_cache_without_converting(tmp_path, monkeypatch):
  leaf_fixtures.femnist(str(tmp_path), num_users=3)
  root = str(tmp_path / 'data' / 'femnist')
  first, _ = data.leaf(root)

  def fail(*args):
    raise AssertionError('converted again')

  monkeypatch.setattr(leaf_cache, '_build', fail)
  second, _ = data.leaf(root)
  assert second.client_ids == first.client_ids and second.cache_path == first.cache_path


@pytest.mark.parametrize('change', ['rewrite', 'add', 'remove'])
def test_stale_cache_is_rebuilt(tmp_path, change):
  data_dir, _ = leaf_fixtures.femnist(str(tmp_path), num_users=6)
  root = str(tmp_path / 'data' / 'femnist')
  train, _ = data.leaf(root)
  path = sorted(glob.glob(os.path.join(data_dir, 'train', '*.json')))[0]
  if change == 'rewrite':  # same users, new labels (and a new modification time)
    with open(path) as f:
      content = json.load(f)
    for user_data in content['user_data'].values():
      user_data['y'] = [7] * len(user_data['y'])
    leaf_fixtures.write_json(path, content)
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    train, _ = data.leaf(root)
    assert all(train.label_counts[train.client_ids.index(u), 7] == n
               for u, n in zip(content['users'], content['num_samples']))
  elif change == 'add':
    leaf_fixtures.write_json(os.path.join(data_dir, 'train', 'extra.json'),
                             leaf_fixtures.leaf_object(['new'], {'new': {'x': [[0.0] * 784],
                                                                         'y': [5]}}))
    train, _ = data.leaf(root)
    assert 'new' in train.client_ids and train.split_kind == 'mixed'
  else:
    users = json.load(open(path))['users']
    os.remove(path)
    train, _ = data.leaf(root)
    assert not set(users) & set(train.client_ids) and train.split_kind == 'mixed'


def test_cache_dir_keeps_the_data_folder_untouched(tmp_path):
  data_dir, expected = leaf_fixtures.femnist(str(tmp_path / 'leaf'), num_users=3)
  cache_dir = tmp_path / 'cache'
  train, _ = data.leaf(str(tmp_path / 'leaf' / 'data' / 'femnist'), cache_dir=str(cache_dir))
  assert os.path.dirname(train.cache_path) == str(cache_dir)
  assert os.path.basename(train.cache_path).startswith('leaf_femnist_')
  assert sorted(os.listdir(data_dir)) == ['test', 'train']
  _assert_split_equal(train, expected['train'])


def test_a_client_reads_only_its_own_file(tmp_path):
  leaf_fixtures.femnist(str(tmp_path), num_users=3)
  train, _ = data.leaf(str(tmp_path / 'data' / 'femnist'))
  for other in range(1, 3):  # files of the clients 1 and 2
    os.remove(leaf_cache.client_file(os.path.join(train.cache_path, 'train'), other))
  ids = train.client_ids
  assert len(list(train.create_tf_dataset_for_client(ids[0]))) > 0
  with pytest.raises(tf.errors.NotFoundError):
    list(train.create_tf_dataset_for_client(ids[1]))


def test_root_layouts_and_names(tmp_path):
  leaf_fixtures.femnist(str(tmp_path), num_users=3)
  ids = data.leaf(str(tmp_path / 'data' / 'femnist'))[0].client_ids
  assert data.leaf(str(tmp_path), name='femnist')[0].client_ids == ids  # LEAF's checkout
  assert data.leaf(str(tmp_path / 'data' / 'femnist' / 'data'))[0].client_ids == ids
  with pytest.raises(ValueError, match="name='celeba' but .* is the folder of LEAF dataset "
                                       "'femnist'"):
    data.leaf(str(tmp_path / 'data' / 'femnist'), name='celeba')
  for bad in ('FEMNIST', 3, ['femnist']):
    with pytest.raises(tff_conflict.ArgumentError,
                       match="one of 'celeba', 'femnist', 'shakespeare', 'synthetic'") as info:
      data.leaf(str(tmp_path), name=bad)
    assert (info.value.argument, info.value.value) == ('name', bad)
  with pytest.raises(ValueError, match="image_dir applies only to celeba"):
    data.leaf(str(tmp_path / 'data' / 'femnist'), image_dir=str(tmp_path))
  os.rename(tmp_path / 'data' / 'femnist', tmp_path / 'data' / 'mine')
  with pytest.raises(ValueError, match="cannot tell which LEAF dataset .* pass name="):
    data.leaf(str(tmp_path / 'data' / 'mine'))
  assert data.leaf(str(tmp_path / 'data' / 'mine'), name='femnist')[0].client_ids == ids


@pytest.mark.parametrize('name', ['sent140', 'reddit'])
def test_word_level_text_datasets_are_refused_by_name(tmp_path, name):
  for split in ('train', 'test'):
    os.makedirs(tmp_path / 'data' / name / 'data' / split)
  with pytest.raises(ValueError, match=f"LEAF dataset '{name}' is not supported; supported are "
                                       r"\['celeba', 'femnist', 'shakespeare', 'synthetic'\]"):
    data.leaf(str(tmp_path / 'data' / name))
  with pytest.raises(ValueError, match=f"LEAF dataset '{name}' is not supported"):
    data.leaf(str(tmp_path), name=name)


def test_missing_directories_and_files(tmp_path):
  with pytest.raises(FileNotFoundError, match='does not exist'):
    data.leaf(str(tmp_path / 'nowhere'), name='femnist')
  os.makedirs(tmp_path / 'femnist' / 'data' / 'train')
  with pytest.raises(FileNotFoundError, match='expected the train/ and test/ directories'):
    data.leaf(str(tmp_path / 'femnist'))
  os.makedirs(tmp_path / 'femnist' / 'data' / 'test')
  with pytest.raises(FileNotFoundError, match=r'femnist/data/train holds no \.json file'):
    data.leaf(str(tmp_path / 'femnist'))


def _first_train_file(data_dir):
  return sorted(glob.glob(os.path.join(data_dir, 'train', '*.json')))[0]


def _edit_text(path, old, new):
  with open(path) as f:
    text = f.read()
  assert old in text
  with open(path, 'w') as f:
    f.write(text.replace(old, new, 1))


def _truncate(path):
  with open(path, 'rb+') as f:
    f.truncate(os.path.getsize(path) // 2)


def _edit_json(path, edit):
  with open(path) as f:
    content = json.load(f)
  edit(content)
  leaf_fixtures.write_json(path, content)


def _drop_data(content):
  del content['user_data'][content['users'][1]]


def _drop_y(content):
  content['user_data'][content['users'][0]]['y'].pop()


def _wrong_count(content):
  content['num_samples'][0] += 1


def _label(value):
  def edit(content):
    content['user_data'][content['users'][0]]['y'][0] = value
  return edit


def _nan(content):
  content['user_data'][content['users'][0]]['x'][0][5] = float('nan')


@pytest.mark.parametrize('corrupt, message', [
    (_truncate, 'truncated'),
    (lambda p: _edit_text(p, '}}', '}'), 'truncated'),
    (lambda p: _edit_text(p, ', "num_samples"', ' "num_samples"'),
     "expected ',' or '}' in the top-level object"),
    (lambda p: _edit_text(p, '0.0', '0.0.0'), 'malformed number in the x of user'),
    (lambda p: _edit_json(p, _drop_data), 'is listed in "users" but has no entry in "user_data"'),
    (lambda p: _edit_json(p, _drop_y), 'x values but'),
    (lambda p: _edit_json(p, _wrong_count), '"num_samples" gives'),
    (lambda p: _edit_json(p, _label(62)), r'label 62 is outside \[0, 62\)'),
    (lambda p: _edit_json(p, _label(2.5)), 'label 2.5 is not an integer'),
    (lambda p: _edit_json(p, _nan), "unexpected 'N'"),
])
def test_bad_input_is_an_error_naming_the_file_and_caches_nothing(tmp_path, corrupt, message):
  data_dir, _ = leaf_fixtures.femnist(str(tmp_path), num_users=5)
  path = _first_train_file(data_dir)
  corrupt(path)
  with pytest.raises(data.LeafFormatError, match=message) as info:
    data.leaf(str(tmp_path / 'data' / 'femnist'))
  assert os.path.basename(path) in str(info.value)
  assert _no_cache_left(data_dir)


def test_a_failed_rebuild_keeps_failing_until_the_files_are_fixed(tmp_path):
  data_dir, expected = leaf_fixtures.femnist(str(tmp_path), num_users=5)
  root = str(tmp_path / 'data' / 'femnist')
  data.leaf(root)
  path = _first_train_file(data_dir)
  with open(path, 'rb') as f:
    good = f.read()
  _truncate(path)
  for _ in range(2):  # the old cache is stale: never served instead of the broken file
    with pytest.raises(data.LeafFormatError, match='truncated'):
      data.leaf(root)
  with open(path, 'wb') as f:
    f.write(good)
  train, _ = data.leaf(root)
  _assert_split_equal(train, expected['train'])
  assert not glob.glob(train.cache_path + '.partial-*')


def test_user_in_two_files_of_a_split(tmp_path):
  data_dir, _ = leaf_fixtures.femnist(str(tmp_path), num_users=5)
  files = sorted(glob.glob(os.path.join(data_dir, 'train', '*.json')))
  with open(files[0]) as f:
    content = json.load(f)
  leaf_fixtures.write_json(os.path.join(data_dir, 'train', 'zz_copy.json'), content)
  with pytest.raises(data.LeafFormatError, match=f"zz_copy.json: user '{content['users'][0]}' is "
                                                 f'also in {files[0]}'):
    data.leaf(str(tmp_path / 'data' / 'femnist'))


def test_wrong_row_length_for_femnist(tmp_path):
  data_dir, _ = leaf_fixtures.synthetic(str(tmp_path))
  os.rename(os.path.dirname(data_dir), tmp_path / 'data' / 'femnist')
  with pytest.raises(data.LeafFormatError, match='has a row of 60 numbers, expected 784'):
    data.leaf(str(tmp_path / 'data' / 'femnist'))


def test_a_current_cache_opens_where_nothing_can_be_written(tmp_path):
  data_dir, expected = leaf_fixtures.femnist(str(tmp_path), num_users=3)
  root = str(tmp_path / 'data' / 'femnist')
  train, _ = data.leaf(root)
  lock = train.cache_path + '.lock'
  os.remove(lock)
  os.mkdir(lock)  # the lock cannot be opened, as in a read-only folder (even for root)
  train, _ = data.leaf(root)
  _assert_split_equal(train, expected['train'])
  os.utime(_first_train_file(data_dir), ns=(0, 0))  # now the cache is stale
  with pytest.raises(OSError, match='cannot write the LEAF cache .* pass cache_dir='):
    data.leaf(root)


def test_celeba_cache_follows_the_pillow_version(tmp_path, monkeypatch):
  leaf_fixtures.celeba(str(tmp_path), num_users=2)
  root = str(tmp_path / 'data' / 'celeba')
  data.leaf(root)
  built = []
  original = leaf_cache._build  # pylint: disable=protected-access
  monkeypatch.setattr(leaf_cache, '_build', lambda *a: built.append(1) or original(*a))
  data.leaf(root)
  assert not built
  monkeypatch.setattr(leaf_cache, '_pillow_version', lambda: '0.0')
  data.leaf(root)
  assert built


def test_the_benchmark_fixture_is_leafs_format(tmp_path):
  from perf import leaf_fixture  # pylint: disable=g-import-not-at-top
  stats = leaf_fixture.write_femnist(str(tmp_path), users=5, mean_samples=6, pool_rows=16)
  files = sorted(glob.glob(str(tmp_path / 'data' / 'femnist' / 'data' / '*' / '*.json')))
  assert len(files) == stats.num_files == 2
  for path in files:
    with open(path, 'rb') as f:
      raw = f.read()
    assert json.dumps(json.loads(raw)).encode() == raw  # exactly what json.dump writes
  train, test = data.leaf(str(tmp_path / 'data' / 'femnist'))
  assert data.describe(train)['num_examples'] == stats.train_examples
  assert data.describe(test)['num_examples'] == stats.test_examples
  assert len(train.client_ids) == len(test.client_ids) == stats.users
