"""tff_conflict.simulation.checkpoints: a tff.program.ProgramStateManager; exact round trip,
atomic saves, checked loads, versions kept."""

import asyncio
import collections
import contextlib
import errno
import gc
import os
import sys

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_conflict import _files
from tff_conflict.simulation import checkpoints


def _state(scale=1.0):
  return collections.OrderedDict(
      weights=[np.arange(6, dtype=np.float32).reshape(2, 3) * scale,
               np.ones(3, np.float32) * scale],
      step=np.int64(7), seed=np.array([1, 2], np.int64), lr=np.float32(0.1 * scale),
      counts=collections.OrderedDict(rounds=3))


def _assert_same(a, b):
  np.testing.assert_array_equal(a['weights'][0], b['weights'][0])
  np.testing.assert_array_equal(a['weights'][1], b['weights'][1])
  for key in ('step', 'lr'):
    assert type(a[key]) is type(b[key]), key  # pylint: disable=unidiomatic-typecheck
    assert a[key] == b[key]
  np.testing.assert_array_equal(a['seed'], b['seed'])
  assert a['counts']['rounds'] == b['counts']['rounds'] and isinstance(b['counts']['rounds'], int)


def test_round_trip_is_exact_and_keeps_types(tmp_path):
  manager = checkpoints.CheckpointManager(str(tmp_path))
  assert isinstance(manager, tff.program.ProgramStateManager)
  assert asyncio.run(manager.get_versions()) is None
  with pytest.raises(tff.program.ProgramStateNotFoundError):
    asyncio.run(manager.load(4, _state()))
  state = _state(1.5)
  asyncio.run(manager.save(state, 4))
  assert manager.versions() == [4] and os.listdir(tmp_path) == ['round_4.npz']
  assert asyncio.run(manager.get_versions()) == [4]
  _assert_same(state, asyncio.run(manager.load(4, _state())))
  assert asyncio.run(manager.load_latest(_state()))[1] == 4


def test_keep_total_replace_and_remove_after(tmp_path):
  manager = checkpoints.CheckpointManager(str(tmp_path), keep_total=2)
  for r in (1, 2, 3):
    asyncio.run(manager.save(_state(r), r))
  assert manager.versions() == [2, 3]
  asyncio.run(manager.save(_state(30), 3))  # replacing an existing version is allowed
  assert asyncio.run(manager.load(3, _state()))['lr'] == np.float32(3.0)
  manager.remove_after(2)
  assert manager.versions() == [2]
  manager.remove_after(0)
  assert manager.versions() == [] and asyncio.run(manager.load_latest(_state())) == (None, 0)


@pytest.mark.parametrize('damage, message', [
    (lambda path: open(path, 'r+b').truncate(50), 'cannot be read'),
    (lambda path: open(path, 'wb').write(b'garbage'), 'cannot be read'),
])
def test_a_damaged_file_is_refused(tmp_path, damage, message):
  manager = checkpoints.CheckpointManager(str(tmp_path), keep_total=0)
  asyncio.run(manager.save(_state(1), 1))
  asyncio.run(manager.save(_state(2), 2))
  damage(manager.path(2))
  with pytest.raises(checkpoints.CheckpointError, match=f'round_2.npz {message}'):
    asyncio.run(manager.load(2, _state()))
  _assert_same(_state(1), asyncio.run(manager.load(1, _state())))


def test_a_state_of_another_structure_is_refused(tmp_path):
  manager = checkpoints.CheckpointManager(str(tmp_path))
  asyncio.run(manager.save(_state(), 1))
  other = _state()
  other['weights'][1] = np.ones(4, np.float32)
  with pytest.raises(checkpoints.CheckpointError,
                     match=r'array 5 has shape \(3,\) and dtype float32, the state has \(4,\)'):
    asyncio.run(manager.load(1, other))
  smaller = _state()
  del smaller['seed']
  with pytest.raises(checkpoints.CheckpointError, match='holds 6 arrays, the state has 5'):
    asyncio.run(manager.load(1, smaller))


def test_a_save_cut_short_leaves_no_version_and_is_cleaned_up(tmp_path):
  manager = checkpoints.CheckpointManager(str(tmp_path))
  asyncio.run(manager.save(_state(), 1))
  leftover = tmp_path / 'round_2.npz.tmp-12345'  # what a kill during a save leaves
  leftover.write_bytes(b'partial')
  assert manager.versions() == [1]
  checkpoints.CheckpointManager(str(tmp_path))
  assert not leftover.exists()


class _FullDisk:
  """A file whose writes fail as on a full disk once `room` bytes are written."""

  def __init__(self, f, room):
    self._f, self._room = f, room

  def write(self, data):
    self._room -= len(data)
    if self._room < 0:
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return self._f.write(data)

  def __getattr__(self, name):
    return getattr(self._f, name)


@pytest.mark.parametrize('room', [0, 200, 900])
def test_a_full_disk_fails_the_save_once_and_leaves_nothing_behind(tmp_path, monkeypatch, room):
  manager = checkpoints.CheckpointManager(str(tmp_path))
  asyncio.run(manager.save(_state(), 1))
  atomic_open = _files.atomic_open

  @contextlib.contextmanager
  def full(path, mode='w', **kwargs):
    with atomic_open(path, mode, **kwargs) as f:
      yield _FullDisk(f, room)

  monkeypatch.setattr(_files, 'atomic_open', full)
  ignored = []   # what Python would print as 'Exception ignored in ...' (ZipFile.__del__)
  monkeypatch.setattr(sys, 'unraisablehook', ignored.append)
  with pytest.raises(OSError) as info:
    asyncio.run(manager.save(_state(2.0), 2))
  assert info.value.errno == errno.ENOSPC and info.value.filename == manager.path(2)
  del info
  gc.collect()
  assert not ignored, [str(u.exc_value) for u in ignored]
  assert sorted(os.listdir(tmp_path)) == ['round_1.npz']
  _assert_same(_state(), asyncio.run(manager.load(1, _state())))
