"""Server-state checkpoints on `tff.program`'s interface: one `round_<r>.npz` per version, written
atomically, checked leaf by leaf when loaded (docs/design.md, "Results on disk")."""

import os
import re
import zipfile
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff
import tree

from tff_conflict import _files

_PREFIX = 'round_'
_VERSION = re.compile(rf'^{_PREFIX}(\d+)\.npz$')
_FORMAT_KEY, _FORMAT = 'tff_conflict_checkpoint', 1


class CheckpointError(ValueError):
  """A checkpoint that cannot be read, or does not hold a state of the given structure."""


def saved_versions(root_dir: str) -> list[int]:
  """The round numbers saved under `root_dir`, ascending ([] when it does not exist)."""
  if not os.path.isdir(root_dir):
    return []
  found = (_VERSION.match(name) for name in os.listdir(root_dir))
  return sorted(int(m.group(1)) for m in found if m)


class CheckpointManager(tff.program.ProgramStateManager):
  """Server states under `root_dir`, the newest `keep_total` kept (<= 0: all): version r, the state
  after round r, is its dm-tree leaves in one `.npz`; a load checks each leaf's shape and dtype.
  TFF's methods are coroutines; `versions`, `path`, `remove_after` are not."""

  def __init__(self, root_dir: str, keep_total: int = 3):
    self.root_dir, self._keep_total = root_dir, int(keep_total)
    os.makedirs(root_dir, exist_ok=True)
    _files.remove_temporaries(root_dir, _PREFIX)

  def versions(self) -> list[int]:
    return saved_versions(self.root_dir)

  def path(self, version: int) -> str:
    return os.path.join(self.root_dir, f'{_PREFIX}{version}.npz')

  async def get_versions(self) -> Optional[list[int]]:
    """Saved round numbers, ascending; None when there is none (TFF's contract)."""
    return self.versions() or None

  async def save(self, program_state: Any, version: int) -> None:
    """Saves `program_state` as version `version`, then removes the oldest beyond `keep_total`."""
    leaves = [np.asarray(leaf) for leaf in tree.flatten(program_state)]
    if any(leaf.dtype == object for leaf in leaves):
      raise ValueError('a checkpointed state must hold arrays and scalars only, got a leaf of '
                       'Python objects')
    arrays = {_FORMAT_KEY: np.int64(_FORMAT), **{f'leaf_{i}': x for i, x in enumerate(leaves)}}
    # np.savez's layout, but the archive is closed even when a write fails (a full disk).
    with _files.atomic_open(self.path(version), 'wb') as f, zipfile.ZipFile(f, 'w') as archive:
      for name, array in arrays.items():
        with archive.open(f'{name}.npy', 'w', force_zip64=True) as member:
          np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
    if self._keep_total > 0:
      for old in self.versions()[:-self._keep_total]:
        os.remove(self.path(old))

  async def load(self, version: int, structure: Any) -> Any:
    """The state of `version` like `structure`; `ProgramStateNotFoundError`, `CheckpointError`."""
    path = self.path(version)
    if not os.path.exists(path):
      raise tff.program.ProgramStateNotFoundError(version)
    templates = tree.flatten(structure)
    try:
      with np.load(path, allow_pickle=False) as data:
        if int(data[_FORMAT_KEY]) != _FORMAT:
          raise CheckpointError(f'{path} is of format {int(data[_FORMAT_KEY])}, expected '
                                f'{_FORMAT}')
        names = [n for n in data.files if n != _FORMAT_KEY]
        if len(names) != len(templates):
          raise CheckpointError(f'{path} holds {len(names)} arrays, the state has '
                                f'{len(templates)}')
        leaves = [_restore_leaf(data[f'leaf_{i}'], template, path, i)
                  for i, template in enumerate(templates)]
    except CheckpointError:
      raise
    except Exception as e:  # pylint: disable=broad-except  (zip, npy and OS errors alike)
      raise CheckpointError(f'{path} cannot be read ({type(e).__name__}: {e})') from None
    return tree.unflatten_as(structure, leaves)

  def remove_after(self, round_num: int) -> None:
    for version in (v for v in self.versions() if v > round_num):
      os.remove(self.path(version))


def _restore_leaf(array: np.ndarray, template: Any, path: str, index: int) -> Any:
  expected = np.asarray(template)
  if array.shape != expected.shape or array.dtype != expected.dtype:
    raise CheckpointError(f'{path}: array {index} has shape {array.shape} and dtype '
                          f'{array.dtype}, the state has {expected.shape} and {expected.dtype}')
  if isinstance(template, np.ndarray):
    return array
  if isinstance(template, np.generic):
    return template.dtype.type(array[()])
  return type(template)(array.item())  # a Python scalar
