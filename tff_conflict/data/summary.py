"""`describe`: a printable summary of a federated data set's sizes and label skew."""

from typing import Optional

import numpy as np

from tff_conflict import _checks


class DataSummary(dict):
  """A plain dict of summary figures whose `str()` is a short readable table."""

  def __str__(self) -> str:
    lines = []
    for key, value in self.items():
      if isinstance(value, dict):
        value = ', '.join(f'{k} {_fmt(v)}' for k, v in value.items())
      else:
        value = _fmt(value)
      lines.append(f'{key:<24} {value}')
    return '\n'.join(lines)


def _fmt(value) -> str:
  if isinstance(value, float):
    return f'{value:.4g}'
  return str(value)


def _labels_of(dataset) -> np.ndarray:
  chunks = [np.asarray(batch).reshape(-1) for batch in
            dataset.map(lambda e: e['y']).batch(4096).as_numpy_iterator()]
  return np.concatenate(chunks).astype(np.int64) if chunks else np.zeros(0, np.int64)


def label_counts_of(client_data, max_clients: Optional[int] = None) -> np.ndarray:
  """[clients, classes] label counts: from `client_data.label_counts` when the client data has
  it (`ArrayClientData`), else by reading every client's `y` (slow for EMNIST's 3,400 writers)."""
  counts = getattr(client_data, 'label_counts', None)
  if counts is not None:
    counts = np.asarray(counts)
    return counts if max_clients is None else counts[:max_clients]
  ids = client_data.client_ids if max_clients is None else client_data.client_ids[:max_clients]
  labels = [_labels_of(client_data.create_tf_dataset_for_client(cid)) for cid in ids]
  width = max([int(y.max()) + 1 for y in labels if y.size] + [0])
  return np.stack([np.bincount(y, minlength=width) for y in labels]).astype(np.int64)


def summarize_counts(counts: np.ndarray) -> DataSummary:
  """The summary of a [clients, classes] label-count matrix (see `describe`)."""
  counts = np.asarray(counts, dtype=np.int64)
  sizes = counts.sum(axis=1)
  total = int(sizes.sum())
  nonempty = sizes > 0
  pooled = counts.sum(axis=0) / max(total, 1)
  dists = counts[nonempty] / sizes[nonempty, None]
  tv = 0.5 * np.abs(dists - pooled).sum(axis=1) if dists.size else np.zeros(0)
  classes_per_client = (counts > 0).sum(axis=1)
  dominant = dists.max(axis=1) if dists.size else np.zeros(0)

  def stats(values, keys=('min', 'median', 'max')):
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
      return {k: float('nan') for k in keys}
    out = {}
    for k in keys:
      v = float(getattr(np, k)(values))
      out[k] = int(v) if k in ('min', 'max') and v.is_integer() else v
    return out

  return DataSummary(
      num_clients=int(counts.shape[0]),
      num_examples=total,
      num_empty_clients=int((~nonempty).sum()),
      examples_per_client=stats(sizes, ('min', 'median', 'max', 'mean')),
      num_classes=int((counts.sum(axis=0) > 0).sum()),
      classes_per_client=stats(classes_per_client, ('min', 'median', 'max', 'mean')),
      dominant_class_fraction=stats(dominant, ('min', 'median', 'max', 'mean')),
      label_tv_distance=stats(tv, ('min', 'median', 'max', 'mean')),
  )


def describe(client_data, *, max_clients=None) -> DataSummary:
  """Summarizes a `tff.simulation.datasets.ClientData` with `OrderedDict(x, y)` elements.

  Keys (a dict; `print()` shows one line per key):
    num_clients, num_examples, num_empty_clients;
    examples_per_client: min / median / max / mean;
    num_classes: labels present anywhere;
    classes_per_client: distinct labels per client, min / median / max / mean;
    dominant_class_fraction: per client, the share of its most frequent label;
    label_tv_distance: per client, the total-variation distance `0.5 sum_c |p_k(c) - p(c)|`
      between its label distribution and the pooled one (0: IID; near 1: disjoint labels).
  Empty clients are left out of the per-client label statistics. Client data that describes
  itself (`summary_header`, e.g. `leaf`'s: the source and whether the split is sample-based or
  user-based) gets those keys first.

  Args:
    client_data: the client data; `ArrayClientData` is summarized from its stored counts,
      others by reading every client's labels.
    max_clients: summarize only the first `max_clients` client ids (None: all).
  """
  if max_clients is not None:
    max_clients = _checks.check_int('max_clients', max_clients, minimum=1)
  summary = summarize_counts(label_counts_of(client_data, max_clients))
  header = getattr(client_data, 'summary_header', None)
  if header:
    summary = DataSummary(list(header.items()) + list(summary.items()))
  return summary
