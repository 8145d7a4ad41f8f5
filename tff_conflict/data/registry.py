"""Every data set `load_regime` reads, by name: one `info.Dataset` per line of `DATASETS`, declared
in the data set's own module, and the lookups that read it (`get`, `dataset_info`)."""

from tff_conflict import _checks
from tff_conflict.data import digits_data
from tff_conflict.data import emnist_data
from tff_conflict.data import fashion_mnist_data
from tff_conflict.data import info
from tff_conflict.data import leaf_data
from tff_conflict.data import mnist_data
from tff_conflict.data import synthetic_data
from tff_conflict.data import tfds_data

DATASETS: dict[str, info.Dataset] = {d.name: d for d in (
    digits_data.DATASET,
    mnist_data.DATASET,
    fashion_mnist_data.DATASET,
    *tfds_data.DATASETS,
    *emnist_data.DATASETS,
    *leaf_data.DATASETS,
    synthetic_data.DATASET,
)}

# The arguments of `load_regime` that point at data (`info.Dataset.source`).
SOURCES = ('data_dir', 'leaf_dir', 'cache_dir')


def get(name: str) -> info.Dataset:
  """The entry of data set `name`; `ArgumentError` naming it when there is none."""
  return DATASETS[_checks.check_choice('dataset', name, tuple(DATASETS))]


def dataset_info(name: str) -> info.DatasetInfo:
  """The `DatasetInfo` of a data set of `DATASETS`; `ValueError` for any other name, and for
  LEAF Synthetic, whose shape and classes are its files' (`data.leaf(...)[0].info`)."""
  known = {n: d.info for n, d in DATASETS.items() if d.info is not None}
  return known[_checks.check_choice('name', name, tuple(known))]
