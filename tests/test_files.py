"""tff_conflict._files: atomic writes that follow the umask; one writer per directory."""

import os
import stat
import subprocess
import sys

import pytest

from tff_conflict import _files as files
from tests.experiments import conftest


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


def test_a_write_the_disk_refuses_names_the_file(tmp_path, monkeypatch):
  import errno  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / 'runs.csv')

  class FullDisk:
    def write(self, data):
      raise OSError(errno.ENOSPC, 'No space left on device')   # as a write() raises it

  with pytest.raises(OSError) as info:
    with files.atomic_open(path) as f:
      FullDisk().write('x')
  assert info.value.errno == errno.ENOSPC and info.value.filename == path
  assert os.listdir(tmp_path) == []


def test_plots_are_written_atomically_with_the_umask(tmp_path, umask_022):
  from experiments.benchmarking import plots as plotting  # pylint: disable=g-import-not-at-top
  path = tmp_path / 'curve.png'
  assert plotting.plot_curves({'a': [{1: 1.0, 2: 0.5}]}, str(path), ylabel='y')
  assert path.read_bytes()[:4] == b'\x89PNG' and stat.S_IMODE(os.stat(path).st_mode) == 0o644
  assert os.listdir(tmp_path) == ['curve.png']


# Holds `files.one_writer(argv[1])`, says so, and sleeps.
_HOLD = ('import sys, time\nfrom tff_conflict import _files as files\n'
         'with files.one_writer(sys.argv[1]):\n  print("held", flush=True)\n  time.sleep(600)\n')


def _holder(directory):
  """Another process holding `directory`'s writer lock."""
  process = subprocess.Popen([sys.executable, '-c', _HOLD, str(directory)], text=True,
                             stdout=subprocess.PIPE, cwd=conftest.REPO_ROOT)
  assert process.stdout.readline() == 'held\n'
  return process


def test_a_directory_another_live_process_writes_is_refused_naming_its_pid(tmp_path):
  holder = _holder(tmp_path)
  try:
    (tmp_path / 'runs.csv').write_text('theirs')
    with pytest.raises(files.Locked, match=rf'process {holder.pid}\b') as e:
      with files.one_writer(str(tmp_path)):
        pytest.fail('entered a directory another process writes')
    assert len(str(e.value).splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == [files.LOCK_FILE, 'runs.csv']
    assert (tmp_path / 'runs.csv').read_text() == 'theirs'
    assert (tmp_path / files.LOCK_FILE).read_text() == f'{holder.pid}\n'
  finally:
    holder.kill()
    holder.wait()


def test_a_lock_left_by_a_killed_process_is_taken_over_with_a_note_and_removed_after(
    tmp_path, capsys):
  holder = _holder(tmp_path)
  holder.kill()
  holder.wait()
  assert (tmp_path / files.LOCK_FILE).read_text() == f'{holder.pid}\n'   # left behind
  with files.one_writer(str(tmp_path)):
    assert (tmp_path / files.LOCK_FILE).read_text() == f'{os.getpid()}\n'
  note = capsys.readouterr().err.splitlines()
  assert len(note) == 1 and f'from process {holder.pid},' in note[0], note
  assert os.listdir(tmp_path) == []   # released and removed
  with files.one_writer(str(tmp_path)):
    pass
  assert capsys.readouterr().err == ''   # nothing to take over
