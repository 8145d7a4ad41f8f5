"""`source_fingerprint`: where a regime's data is read from and its files' sizes and times; equal
for the same files, different when one changes."""

import os

import pytest

from tff_conflict import data
from tff_conflict.data import idx
from tests.data import idx_fixtures
from tests.data import leaf_fixtures
from tests.data import test_emnist_data


def test_the_same_idx_files_give_the_same_fingerprint_and_a_changed_file_another(tmp_path):
  idx_fixtures.fashion_mnist_dir(tmp_path / 'fm')
  first = data.source_fingerprint('fashion_mnist:dir(0.1)@10', data_dir=str(tmp_path / 'fm'))
  assert first['dataset'] == 'fashion_mnist' and first['location'] == str(tmp_path / 'fm')
  assert [f['name'] for f in first['files']] == sorted(
      name for pair in idx.FILES.values() for name in pair)
  assert all(f['size'] > 0 and f['mtime_ns'] > 0 for f in first['files'])
  assert data.source_fingerprint(data.parse_regime('fashion_mnist:iid'),
                                 data_dir=str(tmp_path / 'fm')) == first
  assert data.source_fingerprint('fashion_mnist', data_dir=str(tmp_path / 'fm')) == first
  labels = tmp_path / 'fm' / 't10k-labels-idx1-ubyte.gz'
  stat = os.stat(labels)
  os.utime(labels, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))   # touched: same size
  touched = data.source_fingerprint('fashion_mnist:iid', data_dir=str(tmp_path / 'fm'))
  assert touched != first and touched['location'] == first['location']
  idx_fixtures.fashion_mnist_dir(tmp_path / 'fm', test_per_class=4)   # other files
  assert data.source_fingerprint('fashion_mnist:iid', data_dir=str(tmp_path / 'fm')) != touched
  idx_fixtures.fashion_mnist_dir(tmp_path / 'other')
  elsewhere = data.source_fingerprint('mnist:iid', data_dir=str(tmp_path / 'other'))
  assert elsewhere['location'] == str(tmp_path / 'other') and elsewhere['dataset'] == 'mnist'


def test_bundled_generated_leaf_and_emnist(tmp_path):
  assert data.source_fingerprint('digits:dir(0.1)') == {
      'dataset': 'digits', 'location': 'bundled', 'files': []}
  assert data.source_fingerprint('synthetic(1,1)@10')['location'] == 'generated'
  leaf_fixtures.synthetic(str(tmp_path / 'leaf'))
  leaf_dir = str(tmp_path / 'leaf' / 'data' / 'synthetic')
  got = data.source_fingerprint('leaf_synthetic:natural@2', leaf_dir=leaf_dir)
  assert got['location'] == os.path.join(leaf_dir, 'data')   # the folder of train/ and test/
  assert {f['name'].split(os.sep)[0] for f in got['files']} == {'train', 'test'}
  write_db = test_emnist_data._write_db  # pylint: disable=protected-access
  write_db(str(tmp_path / 'emnist_all.sqlite'))
  got = data.source_fingerprint('emnist:natural', cache_dir=str(tmp_path))
  assert (got['location'], [f['name'] for f in got['files']]) == (
      str(tmp_path), ['emnist_all.sqlite'])


def test_missing_sources_are_named(tmp_path):
  with pytest.raises(ValueError, match='needs leaf_dir'):
    data.source_fingerprint('leaf_shakespeare:natural')
  with pytest.raises(FileNotFoundError, match='MNIST is not in data_dir'):
    data.source_fingerprint('mnist:iid', data_dir=str(tmp_path / 'none'))
  with pytest.raises(ValueError, match='regime'):
    data.source_fingerprint('cats:iid')
