"""What your own data and models (and the built-in data's files) were when a run finished,
recorded in result.json so that a change under the same name is refused, never reused."""

import hashlib
import json
from typing import Any, Callable, Mapping, Optional

import numpy as np
import tensorflow as tf

KEY = 'fingerprint'   # result.json's key


def _digest(value: Any) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def _num_examples(dataset: tf.data.Dataset) -> int:
  size = int(dataset.cardinality())
  return size if size >= 0 else int(dataset.reduce(np.int64(0), lambda n, _: n + 1))


def of_data(train: Any, test: Any) -> dict[str, Any]:
  """The clients and examples of `train` and `test`, ids and sizes digested; the element spec."""
  out = {}
  for part, client_data in (('train', train), ('test', test)):
    sizes = [[str(c), _num_examples(client_data.create_tf_dataset_for_client(c))]
             for c in client_data.client_ids]
    out[part] = {'clients': len(sizes), 'examples': sum(n for _, n in sizes),
                 'ids_and_sizes': _digest(sizes)}
  out['element'] = {k: f'{s.dtype.name}{s.shape.as_list()}'
                    for k, s in train.element_type_structure.items()}
  return out


def of_model(build: Callable[[], tf.keras.Model]) -> dict[str, Any]:
  """The layers and variables' shapes of the built model `build()` makes (in a scratch graph)."""
  with tf.Graph().as_default():
    model = build()
    layers = [type(layer).__name__ for layer in model.layers]
    shapes = [v.shape.as_list() for v in model.weights]
  return {'layers': len(layers), 'parameters': int(sum(np.prod(s) for s in shapes)),
          'layers_and_shapes': _digest([layers, shapes])}


def of_source(dataset: str, data: Any) -> tuple[Optional[str], Optional[str]]:
  """(the folder `dataset`'s files are read from under `data`'s sources, or 'bundled' /
  'generated'; a digest of their names, sizes and times), (None, None) when not found."""
  from tff_conflict import data as data_lib  # pylint: disable=g-import-not-at-top
  try:
    found = data_lib.source_fingerprint(dataset, data_dir=data.data_dir, leaf_dir=data.leaf_dir,
                                        cache_dir=data.cache_dir)
  except (ValueError, OSError):
    return None, None
  return found['location'], _digest(found['files'])


def differences(recorded: Optional[Mapping[str, Any]], current: Mapping[str, Any]) -> list[str]:
  """'what: item recorded -> now' for each item of `current` (`Engine._fingerprint`'s) `recorded`
  differs in."""
  recorded = recorded or {}
  out = []
  for what, now in current.items():
    if not isinstance(recorded.get(what), Mapping):
      out.append(f'{what}: not recorded (the run finished before fingerprints were kept)')
      continue
    before, now = _flat(recorded[what]), _flat(now)
    out += [f'{what} {k}: {before.get(k)} -> {now.get(k)}'
            for k in sorted(set(before) | set(now)) if before.get(k) != now.get(k)]
  return out


def _flat(value: Mapping[str, Any], prefix: str = '') -> dict[str, Any]:
  out = {}
  for key, item in value.items():
    out.update(_flat(item, f'{prefix}{key}.') if isinstance(item, Mapping)
               else {prefix + key: item})
  return out
