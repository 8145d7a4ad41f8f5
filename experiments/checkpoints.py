"""Server-state checkpoints through `tff.program.FileProgramStateManager`.

Versions are round numbers: the state saved as version r is the server state after round r.
TFF's manager is asynchronous; this wrapper runs each call to completion (`asyncio.run`), so a
checkpoint is on disk when `save` returns.

Robustness beyond TFF's manager:
* `load_latest` tries versions from the newest down and skips one that cannot be read (a save cut
  short by Ctrl-C or a crash), with a warning.
* `save` replaces a version that already exists (left behind by a run that was interrupted, or by
  rounds after the checkpoint a resumed run went back to), where TFF's manager refuses.
* `remove_after(r)` drops versions newer than r, so a resumed run never reads a stale future.
"""

import asyncio
import os
from typing import Any, Optional

from absl import logging
import tensorflow as tf

_PREFIX = 'round_'


class CheckpointManager:
  """Saves and restores server state under `root_dir` (`round_<r>` SavedModel directories).

  Args:
    root_dir: the directory holding the checkpoints; created if missing.
    keep_total: how many checkpoints to keep (the first one is kept too); <= 0 keeps all.
  """

  def __init__(self, root_dir: str, keep_total: int = 3):
    self._root_dir = root_dir
    tf.io.gfile.makedirs(root_dir)
    import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
    self._manager = tff.program.FileProgramStateManager(
        root_dir=root_dir, prefix=_PREFIX, keep_total=int(keep_total), keep_first=False)

  @property
  def root_dir(self) -> str:
    return self._root_dir

  def versions(self) -> list[int]:
    """Saved round numbers, ascending."""
    return sorted(asyncio.run(self._manager.get_versions()) or [])

  def _path(self, version: int) -> str:
    return os.path.join(self._root_dir, f'{_PREFIX}{version}')

  def save(self, state: Any, round_num: int) -> None:
    """Saves `state` as the state after round `round_num` (replacing any older save of it)."""
    path = self._path(round_num)
    if tf.io.gfile.exists(path):
      tf.io.gfile.rmtree(path)
    asyncio.run(self._manager.save(state, round_num))

  def load_latest(self, structure: Any) -> tuple[Optional[Any], int]:
    """The newest readable state and its round number, or `(None, 0)` when there is none.

    Args:
      structure: a server state of the same process (e.g. `process.initialize()`), giving the
        structure to restore.
    """
    for version in reversed(self.versions()):
      try:
        return asyncio.run(self._manager.load(version, structure)), version
      except Exception as e:  # pylint: disable=broad-except
        logging.warning('Checkpoint of round %d in %s cannot be read (%s); trying an older one.',
                        version, self._root_dir, e)
    return None, 0

  def remove_after(self, round_num: int) -> None:
    """Removes checkpoints of rounds after `round_num`."""
    for version in self.versions():
      if version > round_num:
        tf.io.gfile.rmtree(self._path(version))

  def remove_all(self) -> None:
    asyncio.run(self._manager.remove_all())
