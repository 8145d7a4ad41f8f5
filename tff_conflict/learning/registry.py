"""Name registries: `LOSSES[name](**kwargs)` -> a Keras loss, `AGGREGATORS[name](**kwargs)` -> a
weighted aggregation factory, with the keyword arguments, defaults and checks of
`tff_conflict.hparams`.
"""

from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import aggregators
from tff_conflict import hparams
from tff_conflict import losses


def cross_entropy_loss() -> tf.keras.losses.Loss:
  """Sparse softmax cross-entropy on logits (FedAvg, McMahan et al. 2017)."""
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def focal_loss(gamma: float = hparams.FOCAL_GAMMA.default,
               beta: float = hparams.FOCAL_BETA.default) -> tf.keras.losses.Loss:
  """FedMGC's focal loss `-beta (1 - p_t)^gamma log p_t`: `tff_conflict.losses.FocalLoss`.

  `hparams.FOCAL_GAMMA` (default 0.5, >= 0), `hparams.FOCAL_BETA` (default 1.0, > 0).
  """
  return losses.FocalLoss(gamma=gamma, beta=beta)


def margin_loss(margin_weight: float = hparams.MARGIN_WEIGHT.default,
                margin_form: str = hparams.MARGIN_FORM.default) -> tf.keras.losses.Loss:
  """FedLD's margin-control loss `CE + lambda log(1 + |z|^2)`: `losses.MarginControlLoss`.

  `hparams.MARGIN_WEIGHT` (default 0.01, >= 0); `hparams.MARGIN_FORM`: "logits" (default, eq. 3)
  or "batch_probabilities" (the authors' code).
  """
  return losses.MarginControlLoss(margin_weight=margin_weight, margin_form=margin_form)


def calibrated_loss(counts: str = hparams.CALIBRATION_COUNTS.default,
                    form: str = hparams.CALIBRATION_FORM.default) -> tf.keras.losses.Loss:
  """FedGA's calibrated-label loss: `tff_conflict.losses.CalibratedLabelLoss`.

  `hparams.CALIBRATION_COUNTS`: "batch" (default) counts the classes of each mini-batch;
  "dataset" those of the client's whole local dataset, counted by the client work in one extra
  pass before training. `hparams.CALIBRATION_FORM`: "soft_target" (default, the authors' code,
  gradient `(sum q) p - q`) or "paper" (eq. 8, gradient `p - q`).
  """
  return losses.CalibratedLabelLoss(counts=counts, form=form)


LOSSES = {
    'ce': cross_entropy_loss,
    'focal': focal_loss,
    'margin': margin_loss,
    'calibrated': calibrated_loss,
}

# The method whose client loss each entry of LOSSES is (for error messages).
LOSS_METHODS = {'focal': 'FedMGC', 'margin': 'FedLD', 'calibrated': 'FedGA'}


def mean_aggregator() -> tff.aggregators.WeightedAggregationFactory:
  """FedAvg's weighted mean, `tff.aggregators.MeanFactory()`."""
  return tff.aggregators.MeanFactory()


def measured_mean_aggregator(max_gather_bytes: Optional[int] = None
                             ) -> tff.aggregators.WeightedAggregationFactory:
  """FedAvg's weighted mean with the conflict diagnostics: `aggregators.MeasuredMeanFactory`
  (the same aggregate as 'mean', gathered at the server to measure it)."""
  return aggregators.MeasuredMeanFactory(max_gather_bytes=max_gather_bytes)


def fedgh_aggregator(order: str = hparams.FEDGH_ORDER.default,
                     seed: Optional[int] = hparams.FEDGH_SEED.default,
                     max_gather_bytes: Optional[int] = None
                     ) -> tff.aggregators.WeightedAggregationFactory:
  """FedGH gradient harmonization: `tff_conflict.aggregators.GradientHarmonizationFactory`."""
  return aggregators.GradientHarmonizationFactory(order=order, seed=seed,
                                                  max_gather_bytes=max_gather_bytes)


def dgc_aggregator(selection_ratio: float = hparams.DGC_SELECTION_RATIO.default,
                   weights_are_losses: bool = hparams.DGC_WEIGHTS_ARE_LOSSES.default,
                   max_gather_bytes: Optional[int] = None
                   ) -> tff.aggregators.WeightedAggregationFactory:
  """FedMGC dominant gradient correction: `aggregators.DominantGradientCorrectionFactory`.

  With `weights_are_losses=True` (default, the method as published) `build_process` sends each
  client's mean training loss as its weight; False treats every loss as equal.
  """
  return aggregators.DominantGradientCorrectionFactory(
      selection_ratio=selection_ratio, weights_are_losses=weights_are_losses,
      max_gather_bytes=max_gather_bytes)


def principal_aggregator(component_ratio: float = hparams.PRINCIPAL_COMPONENT_RATIO.default,
                         max_gather_bytes: Optional[int] = None,
                         preserve_norms: bool = hparams.PRINCIPAL_PRESERVE_NORMS.default,
                         granularity: str = hparams.PRINCIPAL_GRANULARITY.default,
                         first_round_plain_mean: bool = (
                             hparams.PRINCIPAL_FIRST_ROUND_PLAIN_MEAN.default),
                         revision: str = hparams.PRINCIPAL_REVISION.default
                         ) -> tff.aggregators.WeightedAggregationFactory:
  """FedLD principal-gradient aggregation: `aggregators.PrincipalGradientFactory` (per model
  tensor by default, `granularity="model"` for the paper's one matrix)."""
  return aggregators.PrincipalGradientFactory(component_ratio=component_ratio,
                                              max_gather_bytes=max_gather_bytes,
                                              preserve_norms=preserve_norms,
                                              granularity=granularity,
                                              first_round_plain_mean=first_round_plain_mean,
                                              revision=revision)


def corrective_aggregator(alpha: float = hparams.CORRECTIVE_ALPHA.default,
                          max_gather_bytes: Optional[int] = None
                          ) -> tff.aggregators.WeightedAggregationFactory:
  """Corrective gradient weights: `aggregators.CorrectiveGradientFactory` (alpha in [0, 1])."""
  return aggregators.CorrectiveGradientFactory(alpha=alpha, max_gather_bytes=max_gather_bytes)


AGGREGATORS = {
    'mean': mean_aggregator,
    'measured_mean': measured_mean_aggregator,
    'fedgh': fedgh_aggregator,
    'dgc': dgc_aggregator,
    'principal': principal_aggregator,
    'corrective': corrective_aggregator,
}


def is_corrective_factory(factory) -> bool:
  """Whether `factory` is a `tff_conflict.aggregators.CorrectiveGradientFactory`."""
  return isinstance(factory, aggregators.CorrectiveGradientFactory)


def weights_are_losses(factory) -> bool:
  """Whether `factory`, or a factory it wraps, reads its weight channel as client losses (the
  public `weights_are_losses` property, e.g. DGC's); such a factory needs
  `client_weighting="loss"`. TFF's wrappers (`tff.aggregators.clipping_factory`,
  `zeroing_factory`, ...) hold their inner factory as an attribute or in the closure of their
  `create`; both are searched."""
  seen = set()
  pending = [factory]
  while pending:
    current = pending.pop()
    if id(current) in seen:
      continue
    seen.add(id(current))
    if getattr(current, 'weights_are_losses', False) is True:
      return True
    cells = getattr(getattr(type(current), 'create', None), '__closure__', None) or ()
    inner = list(vars(current).values()) if hasattr(current, '__dict__') else []
    for value in inner + [c.cell_contents for c in cells if _cell_is_set(c)]:
      if isinstance(value, (tff.aggregators.WeightedAggregationFactory,
                            tff.aggregators.UnweightedAggregationFactory)):
        pending.append(value)
  return False


def _cell_is_set(cell) -> bool:
  try:
    cell.cell_contents  # pylint: disable=pointless-statement
  except ValueError:
    return False
  return True
