"""FedMGC's dominant gradient correction as a `tff.aggregators.WeightedAggregationFactory`."""

from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.aggregators import _common
from tff_conflict.aggregators import _gather
from tff_conflict.aggregators import _process


class _Required:
  """The default of an argument the caller must give (its absence is a clear error)."""

  def __repr__(self):
    return '<required: True or False>'


REQUIRED = _Required()


class DominantGradientCorrectionFactory(tff.aggregators.WeightedAggregationFactory):
  """Dominant gradient correction (FedMGC DGC), then the unweighted mean of corrected updates.

  Wang, Mao, Wang, Wu, Wu, "Joint Focal Loss and Dominant Gradient Correction for Gradient
  Conflict in Federated Learning", Definition 3, Algorithms 1-2; docs/methods.md, FedMGC. The
  caller says what the weight channel carries (`weights_are_losses`, required): each client's
  training loss (the method as published; `tff_conflict.learning.build_fedmgc`, `build_process`)
  or anything else, e.g. TFF's numbers of examples (then every loss counts as equal).

  `p_i` = mean over j != i of `(u_i . u_j / |u_j| + u_j . u_i / |u_i|) / 2`; `z_i = p_i / l_i`;
  the `ceil(selection_ratio * K)` clients with the largest z are dominant; every update is
  projected off each dominant update it conflicts with (descending z); result
  `(1/K) sum_i u_i` (fedmgc paper, Definition 3, Algorithm 1, Algorithm 2 line 9). The
  math is `tff_conflict.conflict.dominant_correction_with_diagnostics`, called once per round at
  the server on the `[K, d]` stack of flattened updates; the result has exactly the value's type.

  The weight channel:

  `weights_are_losses` has no default: a weight misread as a loss (a number of examples inside
  `tff.learning.algorithms.build_weighted_fed_avg`) would rank clients by `p_i / n_i`, a
  different method, without any error.

  * `weights_are_losses=True` (the method as published): the weight carries `l_i`,
    the client's mean training loss this round, e.g. from
    `tff_conflict.learning.build_loss_weighted_client_work` composed with this factory by
    `tff.learning.templates.compose_learning_process`, as `tff_conflict.learning.build_fedmgc`
    and `build_process(aggregator='dgc')` do. A weight of 0 means "no loss reported" (TFF's
    client work sends 0 for a non-finite update): that client takes no part; it is not treated
    as a loss of 0. The kernel clamps losses below at 1e-12.
  * `weights_are_losses=False`: the weight (e.g. a number of examples) only marks a client as
    taking part (> 0) or not (0); every client's loss counts as equal, so `z_i = p_i`. Use this
    inside `tff.learning.algorithms.build_weighted_fed_avg`, whose weights are numbers of
    examples (or 1) and cannot carry a loss: with True the numbers of examples would be read as
    losses. (TFF 0.87's `build_weighted_fed_avg` takes only the `ClientWeighting` enum,
    so its weights cannot carry a loss; for the published method with a TFF `model_fn` use
    `tff_conflict.learning.build_process(model_fn, ..., aggregator=<this factory>)`, which sends
    the losses.)

  In both modes the mean of the corrected updates is unweighted, as Algorithm 2 line 9 says.

  In both modes a client with weight 0 takes no part and a client whose update or weight holds
  NaN or Inf is excluded and counted; K is the number of clients taking part.

  Composition: the method is homogeneous and sign-equivariant, so per-client wrappers such as
  `tff.aggregators.clipping_factory` compose with it (with `weights_are_losses=True` such a
  wrapper must keep the weight unchanged, which TFF's clipping and zeroing wrappers do).

  Measurements (`OrderedDict`, under `aggregator` in a learning process's metrics):
  `num_clients` (all clients of the round), `num_excluded_nonfinite`, `num_excluded_zero_weight`,
  `num_participating`,
  `conflict_fraction_before`, `conflict_fraction_after`, `min_cosine`, `mean_cosine`,
  `aggregate_norm`, `norm_ratio` (against the unweighted mean), `num_dominant`,
  `num_projections` (docs/methods.md, "Diagnostics").
  """

  def __init__(self, *, selection_ratio: float = hparams.DGC_SELECTION_RATIO.default,
               weights_are_losses: bool = REQUIRED,
               max_gather_bytes: Optional[int] = None):
    """Args:
      selection_ratio: lambda in (0, 1], default 0.5 (`hparams.DGC_SELECTION_RATIO`).
      weights_are_losses: a bool, required (see the class docstring): True when the weight is
        each client's mean training loss, False when it is anything else.
    max_gather_bytes: the memory limit of this factory's gather in TFF's C++ runtime (bytes):
      None (default) uses the process-wide `tff_conflict.aggregators.max_gather_bytes()` when
      `create` runs, 0 builds without the check, a positive int is the limit.

    Raises:
      TypeError: when `weights_are_losses` is not given.
      ValueError: on a bad argument, naming it and the value.
    """
    if weights_are_losses is REQUIRED:
      raise _checks.ArgumentTypeError(argument='weights_are_losses', value=None, message=(
          'DominantGradientCorrectionFactory needs weights_are_losses=True or False (no '
          'default): True when the weight channel carries each client\'s mean training loss '
          '(the method as published; tff_conflict.learning.build_process and build_fedmgc send '
          'it), False when the weight is anything else, e.g. the numbers of examples of '
          'tff.learning.algorithms.build_weighted_fed_avg (every loss then counts as equal, '
          'z_i = p_i). Read as losses, numbers of examples would rank clients by p_i / n_i.'))
    self._selection_ratio = hparams.DGC_SELECTION_RATIO.check(selection_ratio)
    self._weights_are_losses = hparams.DGC_WEIGHTS_ARE_LOSSES.check(weights_are_losses)
    self._max_gather_bytes = _gather.check_factory_limit(max_gather_bytes)

  @property
  def selection_ratio(self) -> float:
    return self._selection_ratio

  @property
  def weights_are_losses(self) -> bool:
    """Whether the weight channel is read as client losses (needs loss-weighted client work)."""
    return self._weights_are_losses

  @property
  def max_gather_bytes(self) -> Optional[int]:
    return self._max_gather_bytes

  def create(self, value_type, weight_type) -> tff.templates.AggregationProcess:
    _common.check_types(value_type, weight_type)
    ratio, are_losses = self._selection_ratio, self._weights_are_losses

    def combine(state, stacks):
      from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
      padded, include = _process.empty_safe(stacks, 'update')
      weights = padded['weight']
      losses = weights if are_losses else tf.ones_like(weights)
      aggregate, diagnostics = conflict.dominant_correction_with_diagnostics(
          padded['update'], losses, selection_ratio=ratio, include=include, validate=False)
      return state, aggregate, diagnostics

    return _process.build_process(
        value_type, weight_type, row_type=_common.update_row_type(value_type),
        make_row=_common.make_update_row(value_type), combine=combine,
        max_gather_bytes=self._max_gather_bytes)
