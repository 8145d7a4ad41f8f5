"""Federated data sets as `(train, test)` pairs of `tff.simulation.datasets.ClientData` of unbatched
`OrderedDict(x=float32 [...], y=int32)` examples (LEAF Shakespeare's x: int32 character ids), their
non-IID splits and named regimes, each data set one module and one line of `registry.DATASETS`
(docs/methods.md, "Data sets and partitions"; docs/design.md, "Adding a dataset")."""

from tff_conflict.data.client_data import first_clients
from tff_conflict.data.client_data import partition_to_client_data
from tff_conflict.data.summary import describe
from tff_conflict.data.digits_data import digits
from tff_conflict.data.emnist_data import emnist
from tff_conflict.data.fashion_mnist_data import fashion_mnist
from tff_conflict.data.idx import IdxFormatError
from tff_conflict.data.fingerprint import source_fingerprint
from tff_conflict.data.info import DatasetInfo
from tff_conflict.data.leaf_data import first_users
from tff_conflict.data.leaf_data import leaf
from tff_conflict.data.leaf_data import LeafClientData
from tff_conflict.data.leaf_json import LeafFormatError
from tff_conflict.data.partition import client_dirichlet_partition
from tff_conflict.data.partition import dirichlet_partition
from tff_conflict.data.partition import iid_partition
from tff_conflict.data.partition import label_quantity_partition
from tff_conflict.data.partition import quantity_skew_partition
from tff_conflict.data.regimes import load_regime
from tff_conflict.data.regimes import parse_regime
from tff_conflict.data.regimes import Regime
from tff_conflict.data.registry import dataset_info
from tff_conflict.data.synthetic_data import synthetic
from tff_conflict.data.tfds_data import tfds_dirichlet
from tff_conflict.data.validation import split_validation

__all__ = [
    'DatasetInfo',
    'Regime',
    'dataset_info',
    'describe',
    'digits',
    'client_dirichlet_partition',
    'dirichlet_partition',
    'emnist',
    'fashion_mnist',
    'IdxFormatError',
    'first_clients',
    'first_users',
    'leaf',
    'LeafClientData',
    'LeafFormatError',
    'iid_partition',
    'label_quantity_partition',
    'load_regime',
    'parse_regime',
    'partition_to_client_data',
    'quantity_skew_partition',
    'source_fingerprint',
    'split_validation',
    'synthetic',
    'tfds_dirichlet',
]
