"""The streaming LEAF JSON reader against the standard library's `json.load`, chunk by chunk."""

import collections
import json

import numpy as np
import pytest

from tff_conflict.data import leaf_json
from tests.data import leaf_fixtures


class RecordingSink:
  """Collects what `parse_file` hands over: {user: {'x': rows or names, 'y': values}}."""

  def __init__(self):
    self.users = collections.OrderedDict()
    self.ended = []

  def begin_user(self, user):
    self.users[user] = {'x': [], 'y': None}
    self.current = user

  def x_rows(self, rows):
    assert rows.dtype == np.float64 and rows.ndim == 2
    self.users[self.current]['x'].extend(rows.tolist())

  def x_names(self, names):
    self.users[self.current]['x'].extend(names)

  def y_values(self, values):
    self.users[self.current]['y'] = values

  def end_user(self, user, count):
    assert user == self.current and count == len(self.users[user]['x'])
    self.ended.append(user)


def _numeric_content(rng, num_users=4, dim=5):
  data = collections.OrderedDict()
  for k in range(num_users):
    n = int(rng.integers(0, 5)) if k else 3
    x = (rng.normal(size=(n, dim)) * 10.0 ** rng.integers(-8, 8, size=(n, dim))).tolist()
    data[f'user "{k}" \u00e9'] = {'x': x, 'y': rng.integers(0, 9, n).tolist()}
  return data


@pytest.mark.parametrize('chunk_bytes', [1, 7, 64, 1 << 20])
@pytest.mark.parametrize('dump_kwargs', [{}, {'indent': 2}, {'separators': (',', ':')}])
def test_numeric_files_read_as_json_load_reads_them(tmp_path, chunk_bytes, dump_kwargs):
  rng = np.random.default_rng(chunk_bytes)
  data = _numeric_content(rng)
  users = list(data)
  path = str(tmp_path / 'f.json')
  leaf_fixtures.write_json(path, leaf_fixtures.leaf_object(users, data), **dump_kwargs)
  sink = RecordingSink()
  summary, row_length, dropped = leaf_json.parse_file(path, sink, x_kind='numeric',
                                                      chunk_bytes=chunk_bytes)
  with open(path) as f:
    reference = json.load(f)
  assert summary.users == reference['users'] and summary.num_samples == reference['num_samples']
  assert row_length == 5 and dropped == []
  assert list(sink.users) == users == sink.ended
  for user in users:
    assert sink.users[user]['x'] == reference['user_data'][user]['x']  # the same float64 values
    assert sink.users[user]['y'] == reference['user_data'][user]['y']


def test_key_order_extra_keys_and_empty_unlisted_users(tmp_path):
  # user_data first, y before x, LEAF's "hierarchies", an unknown per-user key, and an empty entry
  # for a user the split dropped.
  data = collections.OrderedDict(
      a={'y': [1, 2], 'note': {'k': [1, 'x]']}, 'x': [[0.5, 1e-7], [2.0, -3.0]]},
      dropped={'x': [], 'y': []},
      b={'x': [[1.0, 2.0]], 'y': [0]})
  obj = collections.OrderedDict(user_data=data, hierarchies=['h1', 'h2'], num_samples=[2, 1],
                                users=['a', 'b'])
  path = str(tmp_path / 'f.json')
  leaf_fixtures.write_json(path, obj)
  sink = RecordingSink()
  summary, _, dropped = leaf_json.parse_file(path, sink, x_kind='numeric', chunk_bytes=5)
  assert summary.users == ['a', 'b'] and dropped == ['dropped']
  assert sink.users['a'] == {'x': [[0.5, 1e-7], [2.0, -3.0]], 'y': [1, 2]}
  assert sink.users['b'] == {'x': [[1.0, 2.0]], 'y': [0]}


@pytest.mark.parametrize('chunk_bytes', [3, 1 << 20])
def test_image_names(tmp_path, chunk_bytes):
  data = {'7': {'x': ['000001.jpg', 'a,b]"c.jpg'], 'y': [1.0, 0.0]}}
  path = str(tmp_path / 'f.json')
  leaf_fixtures.write_json(path, leaf_fixtures.leaf_object(['7'], data))
  sink = RecordingSink()
  leaf_json.parse_file(path, sink, x_kind='names', chunk_bytes=chunk_bytes)
  assert sink.users['7'] == {'x': ['000001.jpg', 'a,b]"c.jpg'], 'y': [1.0, 0.0]}


def _good_text():
  data = collections.OrderedDict(
      u1={'x': [[0.25, 0.5, 0.75], [1.0, 0.0, 0.5]], 'y': [3, 4]},
      u2={'x': [[0.5, 0.5, 0.5]], 'y': [1]})
  return json.dumps(leaf_fixtures.leaf_object(['u1', 'u2'], data))


@pytest.mark.parametrize('edit, message', [
    (lambda t: t[:len(t) // 2], 'truncated'),
    (lambda t: t[:-1], 'truncated'),
    (lambda t: t[:t.index('"user_data"')], 'truncated'),
    (lambda t: t + ' {}', 'unexpected data after the top-level object'),
    (lambda t: t.replace('0.75', '0.75x'), "unexpected 'x' in the x of user 'u1'"),
    (lambda t: t.replace('0.75', '0..75'), "malformed number in the x of user 'u1'"),
    (lambda t: t.replace('0.75', 'NaN'), "unexpected 'N'"),
    (lambda t: t.replace('0.75', '1e999'), 'non-finite'),
    (lambda t: t.replace('], [1.0', '] [1.0'), "expected ',' between rows"),
    (lambda t: t.replace('[1.0, 0.0, 0.5]', '[1.0, 0.0]'), 'has a row of 2 numbers, expected 3'),
    (lambda t: t.replace('[1.0, 0.0, 0.5]', '[1.0, [0.0], 0.5]'), 'flat lists of numbers'),
    (lambda t: t.replace('"users": ["u1", "u2"]', '"users": ["u1", "u2", "u3"]'),
     '"users" lists 3 users but "num_samples" has 2'),
    (lambda t: t.replace('"users": ["u1", "u2"], "num_samples": [2, 1]',
                         '"users": ["u1", "u2", "u3"], "num_samples": [2, 1, 4]'),
     "user 'u3' is listed in \"users\" but has no entry in \"user_data\""),
    (lambda t: t.replace('"users": ["u1", "u2"], "num_samples": [2, 1]',
                         '"users": ["u1"], "num_samples": [2]'),
     "holds 1 examples of user 'u2', who is not listed"),
    (lambda t: t.replace('"y": [3, 4]', '"y": [3]'), "user 'u1' has 2 x values but 1 y values"),
    (lambda t: t.replace('"num_samples": [2, 1]', '"num_samples": [2, 5]'),
     "\"num_samples\" gives 5 examples for user 'u2' but \"user_data\" holds 1"),
    (lambda t: t.replace('"users": ["u1", "u2"]', '"users": ["u1", "u1"]'),
     "lists 'u1' more than once"),
    (lambda t: t.replace(', "y": [1]', ''), "the data of user 'u2' has no \"y\" list"),
    (lambda t: t.replace('"y": [3, 4]', '"y": [3, true]'), "the y of user 'u1' must be a list"),
    (lambda t: t.replace('"u2": {', '"u1": {'), "user 'u1' appears twice"),
    (lambda t: t.replace('"num_samples": [2, 1], ', ''), 'no "num_samples" list'),
    (lambda t: t.replace('["u1", "u2"]', '["u1" "u2"]'), 'malformed JSON in "users"'),
    (lambda t: '[' + t + ']', 'a LEAF file is one JSON object'),
])
@pytest.mark.parametrize('chunk_bytes', [4, 1 << 20])
def test_bad_files_raise_naming_the_file(tmp_path, edit, message, chunk_bytes):
  text = edit(_good_text())
  path = tmp_path / 'bad_file.json'
  path.write_text(text)
  with pytest.raises(leaf_json.LeafFormatError, match='bad_file.json') as info:
    leaf_json.parse_file(str(path), RecordingSink(), x_kind='numeric', chunk_bytes=chunk_bytes)
  assert message in str(info.value)


def test_row_length_is_enforced_across_calls(tmp_path):
  path = tmp_path / 'f.json'
  path.write_text(_good_text())
  with pytest.raises(leaf_json.LeafFormatError, match='has a row of 3 numbers, expected 784'):
    leaf_json.parse_file(str(path), RecordingSink(), x_kind='numeric', row_length=784)


def test_strings_where_numbers_belong(tmp_path):
  path = tmp_path / 'f.json'
  path.write_text(json.dumps(leaf_fixtures.leaf_object(['u'], {'u': {'x': ['a.jpg'],
                                                                     'y': [1]}})))
  with pytest.raises(leaf_json.LeafFormatError, match="unexpected '\"' in the x of user 'u'"):
    leaf_json.parse_file(str(path), RecordingSink(), x_kind='numeric')
  path.write_text(json.dumps(leaf_fixtures.leaf_object(['u'], {'u': {'x': [[1.0]], 'y': [1]}})))
  with pytest.raises(leaf_json.LeafFormatError, match='must be a list of strings'):
    leaf_json.parse_file(str(path), RecordingSink(), x_kind='names')


def test_labels_as_ints():
  np.testing.assert_array_equal(
      leaf_json.labels_as_ints([0, 1.0, 61], num_classes=62, where='w'), [0, 1, 61])
  assert leaf_json.labels_as_ints([], num_classes=2, where='w').shape == (0,)
  with pytest.raises(ValueError, match=r'w: label 1.5 is not an integer'):
    leaf_json.labels_as_ints([1.5], num_classes=None, where='w')
  with pytest.raises(ValueError, match=r'w: label 62 is outside \[0, 62\)'):
    leaf_json.labels_as_ints([3, 62], num_classes=62, where='w')
  with pytest.raises(ValueError, match=r'label -1 is outside'):
    leaf_json.labels_as_ints([-1], num_classes=None, where='w')
