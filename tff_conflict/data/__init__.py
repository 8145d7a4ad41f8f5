"""Federated data sets as `tff.simulation.datasets.ClientData` pairs `(train, test)`.

Every loader returns client data whose elements are single, UNBATCHED examples
`OrderedDict(x=float32 [...], y=int32 scalar)` (the training code batches them); for images x is
`[H, W, C]`. `dataset_info(name)` gives the element shape and number of classes:

  digits(*, num_clients=20, alpha=0.1, seed=0)    sklearn 8x8 digits, Dirichlet split, offline
  synthetic(alpha, beta, *, num_clients=30, seed=0)  FedProx / LEAF Synthetic(alpha, beta)
  emnist(*, only_digits=False, cache_dir=None)    federated EMNIST by writer (TFF's SQLite file)
  leaf(root, *, name=None, cache_dir=None)        LEAF's FEMNIST, Synthetic or CelebA from the
                                                  JSON files of LEAF's preprocess.sh (cached)
  tfds_dirichlet(name, *, num_clients, alpha, seed=0, data_dir=None)
                                                  mnist, fashion_mnist, cifar10, cifar100
  dirichlet_partition(labels, num_clients, alpha, *, seed, min_examples=1)
  iid_partition, label_quantity_partition (#C=k), quantity_skew_partition
                                                  NIID-Bench's other splits (`partition`)
  parse_regime('digits:dir(0.1)'), load_regime(regime, *, seed)
                                                  a dataset and its split, by name (`regimes`)
  split_validation(client_data, fraction, *, seed)  a validation split of the training clients
  partition_to_client_data(x, y, partition)
  describe(client_data)                           sizes and label-skew summary (a dict)

Test splits: Dirichlet splits (digits, tfds_dirichlet) partition the held-out split over the
same client ids with each client's training label proportions, so
`test.create_tf_dataset_from_all_clients()` is the whole centralized test set; synthetic holds
each client's last 10%; emnist each writer's TFF test examples; leaf the files' own split
(sample-based or user-based, reported by `describe`).
"""

from tff_conflict.data.client_data import partition_to_client_data
from tff_conflict.data.summary import describe
from tff_conflict.data.digits_data import digits
from tff_conflict.data.emnist_data import emnist
from tff_conflict.data.info import dataset_info
from tff_conflict.data.info import DatasetInfo
from tff_conflict.data.leaf_data import leaf
from tff_conflict.data.leaf_data import LeafClientData
from tff_conflict.data.leaf_json import LeafFormatError
from tff_conflict.data.partition import dirichlet_partition
from tff_conflict.data.partition import iid_partition
from tff_conflict.data.partition import label_quantity_partition
from tff_conflict.data.partition import quantity_skew_partition
from tff_conflict.data.regimes import load_regime
from tff_conflict.data.regimes import parse_regime
from tff_conflict.data.regimes import Regime
from tff_conflict.data.synthetic_data import synthetic
from tff_conflict.data.tfds_data import tfds_dirichlet
from tff_conflict.data.validation import split_validation

__all__ = [
    'DatasetInfo',
    'Regime',
    'dataset_info',
    'describe',
    'digits',
    'dirichlet_partition',
    'emnist',
    'leaf',
    'LeafClientData',
    'LeafFormatError',
    'iid_partition',
    'label_quantity_partition',
    'load_regime',
    'parse_regime',
    'partition_to_client_data',
    'quantity_skew_partition',
    'split_validation',
    'synthetic',
    'tfds_dirichlet',
]
