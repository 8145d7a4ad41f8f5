"""The fingerprint of a regime's data: where it is read from and the size and modification time
of every file read (`source_fingerprint`); a run records it to tell when its data changed."""

import os
from typing import Any, Optional

from tff_conflict.data import registry
from tff_conflict.data import regimes


def source_fingerprint(regime_or_dataset: Any, *, data_dir: Optional[str] = None,
                       leaf_dir: Optional[str] = None, cache_dir: Optional[str] = None) -> dict:
  """Where a regime's (or a data set's) data is read from, and each file it reads.

  Returns:
    `{'dataset': name, 'location': the absolute folder read (or 'bundled' for digits,
    'generated' for Synthetic), 'files': [{'name': path relative to location, 'size': bytes,
    'mtime_ns': modification time in ns}, ...] sorted by name}`: equal for the same files,
    different when a file is added, removed, resized or rewritten.

  Raises:
    ValueError: an unknown regime or data set, or a source it needs is not given (named).
    FileNotFoundError: the data is not where its loader would look (the loader's message).
  """
  name = getattr(regime_or_dataset, 'dataset', None)
  if name is None:
    known = isinstance(regime_or_dataset, str) and regime_or_dataset in registry.DATASETS
    name = (regime_or_dataset if known
            else regimes.parse_regime(regime_or_dataset).dataset)
  entry = registry.get(name)
  sources = {'data_dir': data_dir, 'leaf_dir': leaf_dir, 'cache_dir': cache_dir}
  location, paths = entry.files(sources.get(entry.source))
  files = []
  for path in paths:
    stat = os.stat(path)
    files.append({'name': os.path.relpath(path, location), 'size': stat.st_size,
                  'mtime_ns': stat.st_mtime_ns})
  return {'dataset': name, 'location': location,
          'files': sorted(files, key=lambda f: f['name'])}
