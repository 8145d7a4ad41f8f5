"""Partitions of a labelled dataset over clients (pure NumPy), as NIID-Bench names them, plus the
FedGA authors' per-client Dirichlet split (docs/methods.md, "Data sets and partitions")."""

from collections.abc import Sequence

import numpy as np

from tff_conflict import _checks

# Draws of all the class proportions tried before `dirichlet_partition` gives up on min_examples.
MAX_DRAWS = 1000
# NIID-Bench's least client size under quantity skew (`while min_size < 10: redraw`).
QUANTITY_SKEW_MIN_EXAMPLES = 10
# Draws of the client shares tried before `quantity_skew_partition` gives up on min_examples (one
# draw is a few microseconds; Dir(0.5) over 20 clients of 1,438 examples needs about 1,000).
QUANTITY_SKEW_MAX_DRAWS = 100_000


def _check_labels(labels, name: str = 'labels') -> np.ndarray:
  array = np.asarray(labels)
  if array.ndim != 1 or array.size == 0:
    raise _checks.ArgumentError(argument=name, value=labels, message=(
        f'{name} must be a non-empty 1-D array of integer class labels, got shape '
        f'{array.shape}'))
  if not np.issubdtype(array.dtype, np.integer):
    raise _checks.ArgumentError(argument=name, value=labels, message=(
        f'{name} must hold integers, got dtype {array.dtype}'))
  if array.min() < 0:
    raise _checks.ArgumentError(argument=name, value=labels, message=(
        f'{name} must be >= 0, got a label {int(array.min())}'))
  return array.astype(np.int64)


def _split_counts(proportions: np.ndarray, total: int) -> np.ndarray:
  """Counts per client: boundaries `floor(total * cumsum(proportions))`, the last one `total`."""
  bounds = np.floor(np.cumsum(proportions)[:-1] * total).astype(np.int64)
  bounds = np.clip(bounds, 0, total)
  return np.diff(np.concatenate([[0], bounds, [total]]))


def dirichlet_partition(labels, num_clients, alpha, *, seed, min_examples=1) -> list[np.ndarray]:
  """Splits examples over clients with Dirichlet label skew (FedGH Sec. II-B).

  For every class c (in ascending order), with `n_c` its number of examples and
  `P_c = (p_c^1, ..., p_c^K) ~ Dir_K(alpha)`, client k receives
  `floor(n_c * sum_{j<=k} p_c^j) - floor(n_c * sum_{j<k} p_c^j)` examples of class c, drawn
  without replacement at random. If some client ends up with fewer than `min_examples` examples,
  all proportions are drawn again (at most `MAX_DRAWS` times, then `ValueError`).

  Every example is in exactly one client; the same arguments give the same partition.

  Args:
    labels: 1-D integer array of class labels (>= 0), one per example.
    num_clients: number of clients K >= 1.
    alpha: Dirichlet concentration > 0 (smaller: stronger label skew).
    seed: integer >= 0 seeding `np.random.default_rng`.
    min_examples: least number of examples per client (>= 0).

  Returns:
    A list of K int64 arrays of example indices (into `labels`), each in random order.

  Raises:
    ValueError: on a bad argument (named in the message), if `num_clients * min_examples`
      exceeds the number of examples, or if no draw within `MAX_DRAWS` satisfies `min_examples`.
  """
  labels = _check_labels(labels)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  seed = _checks.check_int('seed', seed, minimum=0)
  min_examples = _checks.check_int('min_examples', min_examples, minimum=0)
  if num_clients * min_examples > labels.size:
    raise _checks.ArgumentError(argument='num_clients', value=num_clients, message=(
        f'num_clients={num_clients} clients with min_examples={min_examples} each '
        f'need more than the {labels.size} examples given'))
  rng = np.random.default_rng(seed)
  classes = np.unique(labels)
  class_sizes = np.array([np.count_nonzero(labels == c) for c in classes])
  for _ in range(MAX_DRAWS):
    proportions = rng.dirichlet(np.full(num_clients, alpha), size=len(classes))
    # numpy's small-alpha sampler can return all zeros in float underflow; treat as one-hot.
    bad = ~np.isfinite(proportions).all(axis=1) | (proportions.sum(axis=1) <= 0)
    for row in np.flatnonzero(bad):
      proportions[row] = np.eye(num_clients)[rng.integers(num_clients)]
    counts = np.stack([_split_counts(p, n) for p, n in zip(proportions, class_sizes)])
    if counts.sum(axis=0).min() >= min_examples:
      break
  else:
    raise _checks.ArgumentError(argument='min_examples', value=min_examples, message=(
        f'dirichlet_partition found no split giving each of num_clients={num_clients} clients '
        f'min_examples={min_examples} examples in {MAX_DRAWS} draws (alpha={alpha}, '
        f'{labels.size} examples); lower min_examples or num_clients, or raise alpha'))
  return _assign(labels, classes, counts, rng)


def client_dirichlet_partition(labels, num_clients, alpha, *, seed) -> list[np.ndarray]:
  """Each client's class mix drawn from a Dirichlet, every client the same size (FedGA's code).

  Draws `r_k ~ Dir_C(alpha)` over the C classes present for every client k, then the largest
  common size m such that no class is used more than it has examples: client k receives
  `m r_kc` examples of class c, rounded per client by largest remainder so that its total is
  exactly m (m starts at `floor(min_c n_c / sum_k r_kc)` and is lowered while the rounding
  over-uses a class), drawn without replacement at random. The examples left over are in no
  client, as in the FedGA authors' `naive_dir_ib_index` (which rounds each entry, so its client
  sizes differ by a few; here they are equal).

  Args:
    labels: 1-D integer array of class labels (>= 0), one per example.
    num_clients: number of clients K >= 1.
    alpha: Dirichlet concentration > 0 (smaller: each client holds fewer classes).
    seed: integer >= 0 seeding `np.random.default_rng`.

  Returns:
    A list of K int64 arrays of example indices (into `labels`), each in random order, all of
    the same length m >= 1.

  Raises:
    ValueError: on a bad argument (named in the message), or if the draw leaves m < 1 (too many
      clients for the rarest class's share).
  """
  labels = _check_labels(labels)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  alpha = _checks.check_positive('alpha', alpha)
  seed = _checks.check_int('seed', seed, minimum=0)
  rng = np.random.default_rng(seed)
  classes = np.unique(labels)
  class_sizes = np.array([np.count_nonzero(labels == c) for c in classes])
  mix = rng.dirichlet(np.full(len(classes), alpha), size=num_clients)    # [K, C]
  # numpy's small-alpha sampler can return all zeros in float underflow; treat as one-hot.
  bad = ~np.isfinite(mix).all(axis=1) | (mix.sum(axis=1) <= 0)
  for row in np.flatnonzero(bad):
    mix[row] = np.eye(len(classes))[rng.integers(len(classes))]
  mix = mix / mix.sum(axis=1, keepdims=True)
  demand = mix.sum(axis=0)
  used = demand > 0
  size = int(np.floor(np.min(class_sizes[used] / demand[used])))
  while size >= 1:
    quota = size * mix
    counts = np.floor(quota).astype(np.int64)
    short = size - counts.sum(axis=1)
    order = np.argsort(-(quota - counts), axis=1, kind='stable')
    for k in range(num_clients):
      counts[k, order[k, :short[k]]] += 1
    if (counts.sum(axis=0) <= class_sizes).all():
      break
    size -= 1
  if size < 1:
    raise _checks.ArgumentError(argument='num_clients', value=num_clients, message=(
        f'client_dirichlet_partition cannot give each of num_clients={num_clients} '
        f'clients an example with this draw (alpha={alpha}, seed={seed}, '
        f'{labels.size} examples); lower num_clients or raise alpha'))
  parts = [[] for _ in range(num_clients)]
  for c, column in zip(classes, counts.T):
    members = rng.permutation(np.flatnonzero(labels == c))[:column.sum()]
    for k, chunk in enumerate(np.split(members, np.cumsum(column)[:-1])):
      parts[k].append(chunk)
  return [rng.permutation(np.concatenate(p).astype(np.int64)) for p in parts]


def _assign(labels: np.ndarray, classes: np.ndarray, counts: np.ndarray,
            rng: np.random.Generator) -> list[np.ndarray]:
  """Deals the examples of each class (shuffled) to clients by `counts[class, client]`."""
  num_clients = counts.shape[1]
  parts = [[] for _ in range(num_clients)]
  for c, row in zip(classes, counts):
    members = rng.permutation(np.flatnonzero(labels == c))
    for k, chunk in enumerate(np.split(members, np.cumsum(row)[:-1])):
      parts[k].append(chunk)
  return [rng.permutation(np.concatenate(p).astype(np.int64)) if p else np.zeros(0, np.int64)
          for p in parts]


def iid_partition(num_examples, num_clients, *, seed) -> list[np.ndarray]:
  """Splits examples over clients uniformly at random (NIID-Bench's homogeneous partition).

  A random permutation of the `num_examples` indices is cut into `num_clients` contiguous pieces
  whose sizes differ by at most one (`numpy.array_split`): the first `num_examples % num_clients`
  clients get one more example.

  Args:
    num_examples: number of examples N >= 1.
    num_clients: number of clients K, 1..N.
    seed: integer >= 0 seeding `np.random.default_rng`.

  Returns:
    A list of K int64 arrays of example indices, each in random order.

  Raises:
    ValueError: on a bad argument (named in the message).
  """
  num_examples = _checks.check_int('num_examples', num_examples, minimum=1)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  seed = _checks.check_int('seed', seed, minimum=0)
  if num_clients > num_examples:
    raise _checks.ArgumentError(argument='num_clients', value=num_clients, message=(
        f'num_clients={num_clients} is larger than the {num_examples} examples: '
        'every client needs at least one'))
  rng = np.random.default_rng(seed)
  return [p.astype(np.int64) for p in np.array_split(rng.permutation(num_examples), num_clients)]


def label_quantity_partition(labels, num_clients, classes_per_client, *, seed,
                             num_classes=None) -> list[np.ndarray]:
  """Each client holds exactly `classes_per_client` classes (NIID-Bench's `#C=k`).

  NIID-Bench's quantity-based label imbalance, the FedAvg paper's pathological non-IID split
  generalised (McMahan et al. 2017 give each client shards of 2 classes): client k first takes
  class `k mod C`, then `classes_per_client - 1` further distinct classes drawn uniformly at
  random; then the examples of each class are shuffled and split as equally as possible
  (`numpy.array_split`) among the clients that hold it. With `num_clients >= C` every class is
  held by some client; otherwise the classes nobody drew are left out (their examples are in no
  client).

  Args:
    labels: 1-D integer array of class labels (>= 0), one per example.
    num_clients: number of clients K >= 1.
    classes_per_client: k, 1..C.
    seed: integer >= 0 seeding `np.random.default_rng`.
    num_classes: C; default: the largest label + 1.

  Returns:
    A list of K int64 arrays of example indices, each in random order; client k's examples cover
    exactly k classes.

  Raises:
    ValueError: on a bad argument (named in the message), or if a class has fewer examples than
      clients holding it (some client would hold fewer than k classes).
  """
  labels = _check_labels(labels)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  seed = _checks.check_int('seed', seed, minimum=0)
  if num_classes is None:
    num_classes = int(labels.max()) + 1
  num_classes = _checks.check_int('num_classes', num_classes, minimum=1)
  if labels.max() >= num_classes:
    raise _checks.ArgumentError(argument='num_classes', value=num_classes, message=(
        f'num_classes={num_classes} is not above the largest label '
        f'{int(labels.max())}'))
  classes_per_client = _checks.check_int('classes_per_client', classes_per_client, minimum=1)
  if classes_per_client > num_classes:
    raise _checks.ArgumentError(argument='classes_per_client', value=classes_per_client, message=(
        f'classes_per_client must be at most num_classes={num_classes}, got '
        f'{classes_per_client}'))
  rng = np.random.default_rng(seed)
  held = []
  for k in range(num_clients):
    classes = [k % num_classes]
    while len(classes) < classes_per_client:
      c = int(rng.integers(num_classes))
      if c not in classes:
        classes.append(c)
    held.append(classes)
  parts = [[] for _ in range(num_clients)]
  for c in range(num_classes):
    holders = [k for k in range(num_clients) if c in held[k]]
    if not holders:
      continue
    members = rng.permutation(np.flatnonzero(labels == c))
    if members.size < len(holders):
      raise _checks.ArgumentError(argument='classes_per_client', value=classes_per_client, message=(
          f'class {c} has {members.size} examples for {len(holders)} clients holding '
          f'it: lower num_clients={num_clients} or '
          f'classes_per_client={classes_per_client}'))
    for k, chunk in zip(holders, np.array_split(members, len(holders))):
      parts[k].append(chunk)
  return [rng.permutation(np.concatenate(p).astype(np.int64)) for p in parts]


def quantity_skew_partition(num_examples, num_clients, beta, *, seed,
                            min_examples=QUANTITY_SKEW_MIN_EXAMPLES) -> list[np.ndarray]:
  """Client sizes drawn from a Dirichlet, labels IID (NIID-Bench's quantity skew `q ~ Dir(beta)`).

  Draws `q ~ Dir_K(beta)` and gives client k the next
  `floor(N sum_{j<=k} q_j) - floor(N sum_{j<k} q_j)` indices of a random permutation of the N
  examples (the last client takes the rest). As in NIID-Bench, `q` is drawn again while some
  client would get fewer than `min_examples` examples (default 10, NIID-Bench's), at most
  `QUANTITY_SKEW_MAX_DRAWS` times. Smaller beta: more unequal sizes; beta -> infinity: equal sizes.

  Args:
    num_examples: number of examples N >= 1.
    num_clients: number of clients K >= 1.
    beta: Dirichlet concentration > 0.
    seed: integer >= 0 seeding `np.random.default_rng`.
    min_examples: least number of examples per client (>= 0).

  Returns:
    A list of K int64 arrays of example indices, each in random order.

  Raises:
    ValueError: on a bad argument (named in the message), if `num_clients * min_examples`
      exceeds N, or if no draw within `QUANTITY_SKEW_MAX_DRAWS` satisfies `min_examples`.
  """
  num_examples = _checks.check_int('num_examples', num_examples, minimum=1)
  num_clients = _checks.check_int('num_clients', num_clients, minimum=1)
  beta = _checks.check_positive('beta', beta)
  seed = _checks.check_int('seed', seed, minimum=0)
  min_examples = _checks.check_int('min_examples', min_examples, minimum=0)
  if num_clients * min_examples > num_examples:
    raise _checks.ArgumentError(argument='num_clients', value=num_clients, message=(
        f'num_clients={num_clients} clients with min_examples={min_examples} each '
        f'need more than the {num_examples} examples given'))
  rng = np.random.default_rng(seed)
  order = rng.permutation(num_examples)
  for _ in range(QUANTITY_SKEW_MAX_DRAWS):
    proportions = rng.dirichlet(np.full(num_clients, beta))
    if not np.isfinite(proportions).all() or proportions.sum() <= 0:
      continue
    sizes = _split_counts(proportions / proportions.sum(), num_examples)
    if sizes.min() >= min_examples:
      break
  else:
    raise _checks.ArgumentError(argument='min_examples', value=min_examples, message=(
        f'quantity_skew_partition found no split giving each of num_clients={num_clients} '
        f'clients min_examples={min_examples} examples in {QUANTITY_SKEW_MAX_DRAWS} draws '
        f'(beta={beta}, '
        f'{num_examples} examples); lower min_examples or num_clients, or raise beta'))
  return [rng.permutation(p).astype(np.int64) for p in np.split(order, np.cumsum(sizes)[:-1])]


def partition_like(labels, reference_counts, *, seed, min_examples=1) -> list[np.ndarray]:
  """Splits a held-out set over clients following each client's (training) label proportions.

  The examples of class c go to client k in proportion to `reference_counts[k, c]` (largest-
  remainder rounding, ties broken at random); a class no client holds is spread in proportion to
  the clients' total counts. Then, while a client has fewer than `min_examples` examples, one
  example moves to it from a client with more than `min_examples`, preferring the class the
  receiving client holds most of in `reference_counts`. Every example lands on exactly one client.

  Args:
    labels: 1-D integer labels of the held-out examples.
    reference_counts: [K, C] array, `reference_counts[k, c]` the number of class-c examples client
      k holds in training (C > every label); every row must have a positive sum.
    seed: integer >= 0.
    min_examples: least number of held-out examples per client (>= 0).

  Returns:
    A list of K int64 index arrays into `labels`, each in random order.
  """
  labels = _check_labels(labels)
  reference = np.asarray(reference_counts, dtype=np.float64)
  if reference.ndim != 2 or reference.shape[0] < 1 or reference.shape[1] <= labels.max():
    raise _checks.ArgumentError(argument='reference_counts', value=reference_counts, message=(
        'reference_counts must be a [num_clients, num_classes] array with more '
        f'columns than the largest label ({labels.max()}), got shape '
        f'{reference.shape}'))
  if (reference < 0).any() or not np.isfinite(reference).all() or (reference.sum(1) <= 0).any():
    raise _checks.ArgumentError(argument='reference_counts', value=reference_counts, message=(
        'reference_counts must be finite, >= 0, with a positive sum in every row'))
  seed = _checks.check_int('seed', seed, minimum=0)
  min_examples = _checks.check_int('min_examples', min_examples, minimum=0)
  num_clients, num_classes = reference.shape
  if num_clients * min_examples > labels.size:
    raise _checks.ArgumentError(argument='min_examples', value=min_examples, message=(
        f'num_clients={num_clients} clients with min_examples={min_examples} held-out '
        f'examples each need more than the {labels.size} held-out examples'))
  rng = np.random.default_rng(seed)
  totals = reference.sum(axis=1)
  counts = np.zeros((num_classes, num_clients), np.int64)
  for c in range(num_classes):
    n = int(np.count_nonzero(labels == c))
    if n == 0:
      continue
    weights = reference[:, c] if reference[:, c].sum() > 0 else totals
    quota = n * weights / weights.sum()
    base = np.floor(quota).astype(np.int64)
    remainder = quota - base
    order = np.lexsort((rng.random(num_clients), -remainder))  # largest remainder first
    base[order[:n - base.sum()]] += 1
    counts[c] = base
  _top_up(counts, reference, min_examples)
  return _assign(labels, np.arange(num_classes), counts, rng)


def _top_up(counts: np.ndarray, reference: np.ndarray, min_examples: int) -> None:
  """Moves single examples (in place) until every client holds `min_examples` (see above)."""
  while True:
    sizes = counts.sum(axis=0)
    short = np.flatnonzero(sizes < min_examples)
    if short.size == 0:
      return
    k = short[0]
    donors = sizes > min_examples
    moved = False
    for c in np.argsort(-reference[k], kind='stable'):
      holders = np.flatnonzero(donors & (counts[c] > 0))
      if holders.size:
        j = holders[np.argmax(counts[c, holders])]
        counts[c, j] -= 1
        counts[c, k] += 1
        moved = True
        break
    if not moved:  # cannot happen when sum(sizes) >= K * min_examples; kept as a guard.
      raise ValueError('partition_like could not give every client min_examples examples')


def check_partition(partition: Sequence, num_examples: int) -> list[np.ndarray]:
  """Validates a partition (list of index arrays into `num_examples` examples) for client data."""
  if isinstance(partition, np.ndarray) and partition.dtype != object and partition.ndim != 2:
    raise _checks.ArgumentError(argument='partition', value=partition, message=(
        f'partition must be a list of 1-D index arrays, got an array of shape '
        f'{partition.shape}'))
  try:
    parts = [np.asarray(p) for p in partition]
  except TypeError as e:
    raise _checks.ArgumentError(argument='partition', value=partition, message=(
        f'partition must be a list of 1-D index arrays, got {type(partition)}')) from e
  if not parts:
    raise _checks.ArgumentError(argument='partition', value=partition, message=(
        'partition must hold at least one client, got an empty list'))
  checked = []
  for k, p in enumerate(parts):
    if p.ndim != 1:
      raise _checks.ArgumentError(argument=f'partition[{k}]', value=p, message=(
          f'partition[{k}] must be a 1-D array of indices, got shape {p.shape}'))
    if p.size and not np.issubdtype(p.dtype, np.integer):
      raise _checks.ArgumentError(argument=f'partition[{k}]', value=p, message=(
          f'partition[{k}] must hold integer indices, got dtype {p.dtype}'))
    p = p.astype(np.int64)
    if p.size and (p.min() < 0 or p.max() >= num_examples):
      raise _checks.ArgumentError(argument=f'partition[{k}]', value=p, message=(
          f'partition[{k}] has indices outside [0, {num_examples}): '
          f'min {p.min()}, max {p.max()}'))
    checked.append(p)
  return checked
