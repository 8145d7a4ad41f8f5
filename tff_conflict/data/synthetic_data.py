"""Synthetic(alpha, beta), the FedProx / LEAF synthetic data set, as arrays or TFF `ClientData`."""

import collections
import dataclasses

import numpy as np

from tff_conflict import _checks
from tff_conflict.data import client_data as client_data_lib
from tff_conflict.data import info

NUM_FEATURES = 60
NUM_CLASSES = 10
TRAIN_FRACTION = 0.9


@dataclasses.dataclass(frozen=True)
class SyntheticArrays:
  """The sampled data and the latent variables of Synthetic(alpha, beta), per client."""
  x: list  # K arrays [n_k, 60] float64, shuffled
  y: list  # K arrays [n_k] int64
  num_train: np.ndarray  # [K] floor(0.9 n_k)
  u: np.ndarray  # [K] model means
  b_mean: np.ndarray  # [K] B_k
  v: np.ndarray  # [K, 60] input means
  w: np.ndarray  # [K, 60, 10]
  b: np.ndarray  # [K, 10]


def feature_variances() -> np.ndarray:
  """The diagonal of Sigma: `j^{-1.2}` for j = 1..60."""
  return np.arange(1, NUM_FEATURES + 1, dtype=np.float64) ** -1.2


def synthetic_arrays(alpha, beta, *, num_clients=30, seed=0,
                     train_seed=None) -> SyntheticArrays:
  """Samples Synthetic(alpha, beta) as numpy arrays (the generative process: `synthetic`).

  With `train_seed`, each client's first `num_train[k]` examples (its training examples) are
  drawn again from the same client (`x ~ N(v_k, Sigma)`, `y = argmax(x W_k + b_k)`) with
  `numpy.random.default_rng([train_seed, k])`; the clients and their test examples stay those
  of `seed`.
  """
  alpha = _checks.check_nonnegative('alpha', alpha)
  beta = _checks.check_nonnegative('beta', beta)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  seed = _checks.check_int('seed', seed, minimum=0)
  rng = np.random.default_rng(seed)
  sizes = rng.lognormal(4.0, 2.0, num_clients).astype(np.int64) + 50
  u = alpha * rng.standard_normal(num_clients)
  b_mean = beta * rng.standard_normal(num_clients)
  v = b_mean[:, None] + rng.standard_normal((num_clients, NUM_FEATURES))
  scale = np.sqrt(feature_variances())
  ws, bs, xs, ys = [], [], [], []
  for k in range(num_clients):
    w = u[k] + rng.standard_normal((NUM_FEATURES, NUM_CLASSES))
    b = u[k] + rng.standard_normal(NUM_CLASSES)
    x = v[k] + rng.standard_normal((sizes[k], NUM_FEATURES)) * scale
    y = np.argmax(x @ w + b, axis=1).astype(np.int64)
    order = rng.permutation(sizes[k])
    ws.append(w)
    bs.append(b)
    xs.append(x[order])
    ys.append(y[order])
  num_train = (TRAIN_FRACTION * sizes).astype(np.int64)
  if train_seed is not None:
    train_seed = _checks.check_int('train_seed', train_seed, minimum=0)
    for k in range(num_clients):
      client_rng = np.random.default_rng([train_seed, k])
      x = v[k] + client_rng.standard_normal((num_train[k], NUM_FEATURES)) * scale
      xs[k] = np.concatenate([x, xs[k][num_train[k]:]])
      ys[k] = np.concatenate([np.argmax(x @ ws[k] + bs[k], axis=1).astype(np.int64),
                              ys[k][num_train[k]:]])
  return SyntheticArrays(x=xs, y=ys, num_train=num_train, u=u,
                         b_mean=b_mean, v=v, w=np.stack(ws), b=np.stack(bs))


def synthetic(alpha, beta, *, num_clients=30, seed=0, train_seed=None):
  """Synthetic(alpha, beta) of FedProx / LEAF as TFF `ClientData` (train, test).

  Per client k, a softmax-regression model drawn around `N(u_k, 1)`, `u_k ~ N(0, alpha^2)`, and
  inputs around `N(B_k, 1)`, `B_k ~ N(0, beta^2)`; 60 features, 10 classes. Li et al., "Federated
  Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127, Sec. 5.1 and Appendix
  C.1; the generative process and its properties: docs/methods.md, "Data sets and partitions".

  Elements are UNBATCHED examples `OrderedDict(x=float32 [60], y=int32 scalar)`, 10 classes; the
  training code batches them. Each client's examples are split 90/10 (the first
  `floor(0.9 n_k)` of its shuffled examples train, the rest test), as in FedProx; train and test
  have the same client ids '00'..'29' and every test client is non-empty (n_k >= 50).
  `test.create_tf_dataset_from_all_clients()` is the pooled test set.

  Args:
    alpha: standard deviation (>= 0) of the clients' model means u_k (model heterogeneity).
    beta: standard deviation (>= 0) of the clients' input means B_k (input heterogeneity).
    num_clients: number of clients (30 in the paper).
    seed: integer >= 0; the same arguments give the same data.
    train_seed: None, or an integer >= 0 that draws the clients' training examples again from
      the same clients (`synthetic_arrays`): the clients and the test split stay `seed`'s.

  Returns:
    `(train, test)`, two `ArrayClientData` (`tff.simulation.datasets.ClientData`).
  """
  arrays = synthetic_arrays(alpha, beta, num_clients=num_clients, seed=seed,
                            train_seed=train_seed)
  splits = collections.OrderedDict(train=([], [], []), test=([], [], []))
  offsets = dict(train=0, test=0)
  for x, y, n in zip(arrays.x, arrays.y, arrays.num_train):
    for name, rows in (('train', slice(0, n)), ('test', slice(n, None))):
      xs, ys, parts = splits[name]
      xs.append(x[rows])
      ys.append(y[rows])
      parts.append(np.arange(offsets[name], offsets[name] + len(ys[-1])))
      offsets[name] += len(ys[-1])
  return tuple(
      client_data_lib.ArrayClientData(np.concatenate(xs).astype(np.float32), np.concatenate(ys),
                                      parts, num_classes=NUM_CLASSES)
      for xs, ys, parts in splits.values())


# A Synthetic regime's clients and test examples are drawn with this seed for every run's seed.
SYNTHETIC_DATA_SEED = 0


def _load(regime, *, seed, source=None, cache_dir=None):
  """The regime `synthetic(alpha,beta)@K`: the clients of `SYNTHETIC_DATA_SEED`, their training
  examples drawn again with `seed` (the test split is the same for every seed)."""
  del source, cache_dir
  return synthetic(*regime.param, num_clients=regime.num_clients or DATASET.num_clients,
                   seed=SYNTHETIC_DATA_SEED, train_seed=seed)


DATASET = info.Dataset(
    'synthetic', (NUM_FEATURES,), NUM_CLASSES, loader='synthetic(alpha, beta)',
    model='logistic_regression', files=lambda _: ('generated', []), num_clients=30, load=_load,
    tuning_regime='synthetic(1,1)')
