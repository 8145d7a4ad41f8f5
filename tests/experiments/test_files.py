"""experiments.files: atomic writes that follow the umask."""

import os
import stat

import pytest

from experiments import files


@pytest.fixture
def umask_022():
  previous = os.umask(0o022)
  yield
  os.umask(previous)


@pytest.mark.parametrize('write', [
    lambda path: files.write_text_atomically(path, 'x\n'),
    lambda path: files.write_json_atomically(path, {'a': 1}),
    lambda path: files.write_csv_atomically(path, ['a'], [{'a': 1}]),
])
def test_files_get_the_permissions_of_the_umask(tmp_path, umask_022, write):
  path = str(tmp_path / 'out')
  write(path)
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
  os.umask(0o077)
  write(path)   # replacing a file: the new one follows the umask too
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / 'out'
  files.write_text_atomically(str(path), 'old')
  with pytest.raises(RuntimeError):
    with files.atomic_open(str(path)) as f:
      f.write('new')
      raise RuntimeError('boom')
  assert path.read_text() == 'old'
  assert os.listdir(tmp_path) == ['out']
