"""FedGH as a `tff.aggregators.WeightedAggregationFactory`."""

import collections

from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import hparams
from tff_conflict.aggregators import _common
from tff_conflict.aggregators import _gather
from tff_conflict.aggregators import _process

class GradientHarmonizationFactory(tff.aggregators.WeightedAggregationFactory):
  """Gradient harmonization (FedGH) of the client updates, then their weighted mean.

  Zhang, Sun, Chen, "Tackling the Non-IID Issue in Heterogeneous Federated Learning by Gradient
  Harmonization", arXiv:2309.06692, Algorithm 1; docs/methods.md, FedGH.

  For each client k and each other client j (in a per-round random order, or ascending with
  `order="index"`): if `u_k . ~u_j < 0` then `u_k <- u_k - (u_k . ~u_j) / |~u_j|^2 ~u_j`, with
  `~u` the original updates (fedgh paper, Algorithm 1, lines 76-80; eq. (1)). Result:
  `sum_k w_k u_k`, `w_k = n_k / sum n` over the clients that take part (line 81). The math is
  `tff_conflict.conflict.harmonize_with_diagnostics`, called once per round at the server on the
  `[K, d]` stack of flattened updates (gathered once per round); the result has exactly the value's
  type, so the factory plugs into `tff.learning.algorithms.build_weighted_fed_avg` as
  `model_aggregator`.

  Clients with weight 0 (TFF's client work gives weight 0 to a non-finite delta) take no part;
  a client whose update or weight holds NaN or Inf is excluded and counted.

  Reproducibility: the state is `OrderedDict(seed=int64, round=int64)`. Round r uses the
  stateless seed `[seed, r]`, so two processes with the same `seed` give the same orders in every
  round. With `seed=None` one seed is drawn at random when the process is initialized
  (`tf.random.uniform`), so a run is reproducible from its initial state but runs differ.

  Composition: FedGH is homogeneous and sign-equivariant, so TFF's wrappers that act per client
  before aggregation compose with it, e.g.
  `tff.aggregators.clipping_factory(1.0, GradientHarmonizationFactory())` (clips each update
  first; the inner factory is weighted, so the wrapper is too) or
  `tff.aggregators.zeroing_factory(...)`. Their measurements nest under the wrapper's keys.

  Measurements (`OrderedDict`, one per round; under `aggregator` in a learning process's
  metrics): `num_clients` (all clients of the round), `num_excluded_nonfinite`,
  `num_excluded_zero_weight`, `num_participating` (the clients that take part),
  `conflict_fraction_before`, `conflict_fraction_after`, `min_cosine`, `mean_cosine`,
  `aggregate_norm`, `norm_ratio`, `num_projections` (pair statistics cover the clients that take
  part; docs/methods.md, "Diagnostics").
  """

  def __init__(self, *, order: str = hparams.FEDGH_ORDER.default,
               seed: Optional[int] = hparams.FEDGH_SEED.default,
               max_gather_bytes: Optional[int] = None):
    """Args:
      order: "random" (default; per-round random partner order) or "index" (j ascending;
        order-free, for testing). `hparams.FEDGH_ORDER`.
      seed: None (default: drawn at initialize) or an integer that fits in int64.
        `hparams.FEDGH_SEED`.
    max_gather_bytes: the memory limit of this factory's gather in TFF's C++ runtime (bytes):
      None (default) uses the process-wide `tff_conflict.aggregators.max_gather_bytes()` when
      `create` runs, 0 builds without the check, a positive int is the limit.

    Raises:
      ValueError: on an unknown `order`, a `seed` that is not None or an int64 integer, or a bad
        `max_gather_bytes`.
    """
    self._order = hparams.FEDGH_ORDER.check(order)
    self._seed = hparams.FEDGH_SEED.check(seed)
    self._max_gather_bytes = _gather.check_factory_limit(max_gather_bytes)

  @property
  def order(self) -> str:
    return self._order

  @property
  def seed(self) -> Optional[int]:
    return self._seed

  @property
  def max_gather_bytes(self) -> Optional[int]:
    return self._max_gather_bytes

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    _common.check_types(value_type, weight_type)
    order, seed = self._order, self._seed

    def initial_state():
      if seed is None:
        s = tf.random.uniform([], minval=0, maxval=2**62, dtype=tf.int64)
      else:
        s = tf.constant(seed, tf.int64)
      return collections.OrderedDict(seed=s, round=tf.constant(0, tf.int64))

    def combine(state, stacks):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      padded, include = _process.empty_safe(stacks, 'update')
      aggregate, diagnostics = conflict.harmonize_with_diagnostics(
          padded['update'], padded['weight'], order=order,
          seed=tf.stack([state['seed'], state['round']]), include=include, validate=False)
      new_state = collections.OrderedDict(seed=state['seed'], round=state['round'] + 1)
      return new_state, aggregate, diagnostics

    return _process.build_process(
        value_type, weight_type, row_type=_common.update_row_type(value_type),
        make_row=_common.make_update_row(value_type), combine=combine,
        initial_state=initial_state, max_gather_bytes=self._max_gather_bytes)
