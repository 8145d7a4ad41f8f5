"""Name registries: client losses, server aggregators (and, in `algorithms`, whole methods).

`LOSSES[name](**kwargs)` returns a new `tf.keras.losses.Loss` on (sparse labels, logits);
`AGGREGATORS[name](**kwargs)` returns a new `tff.aggregators.WeightedAggregationFactory`.
Each entry validates its keyword arguments (ValueError naming argument and value) and states
its defaults, which are the papers' (see each function). Experiment binaries map their
`--client_loss` / `--aggregator` flags through these dictionaries.
"""

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.learning import _validation


def cross_entropy_loss() -> tf.keras.losses.Loss:
  """Sparse softmax cross-entropy on logits (FedAvg, McMahan et al. 2017)."""
  return tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def focal_loss(gamma: float = 0.5, beta: float = 1.0) -> tf.keras.losses.Loss:
  """FedMGC's focal loss, fedmgc paper eq. (10): `-beta (1 - p_t)^gamma log p_t`.

  Defaults: the paper tunes gamma in {0.1, 0.2, 0.5, 1.0} and beta in {1.0, 1.2, 1.5, 2.0} per
  dataset (Sec. V-A 2, "Hyperparameter Settings") and names no single value; gamma = 0.5,
  beta = 1.0 lie inside that grid. (`tff_conflict.losses.FocalLoss`'s own default gamma = 2 is
  Lin et al.'s, whose focal loss eq. (9) of the fedmgc paper cites.)
  """
  from tff_conflict import losses  # pylint: disable=g-import-not-at-top
  _validation.check_non_negative('gamma', gamma)
  _validation.check_non_negative('beta', beta)
  return losses.FocalLoss(gamma=gamma, beta=beta)


def margin_loss(margin_weight: float = 0.01) -> tf.keras.losses.Loss:
  """FedLD's margin-control loss, fedld paper eq. (3): `CE + lambda log(1 + |z|^2)`.

  Default lambda = 0.01, the paper's value on the real-world COVID-FL dataset (Sec. 3.1; it uses
  0.1, 0.03, 0.03 on Retina splits 1-3).
  """
  from tff_conflict import losses  # pylint: disable=g-import-not-at-top
  _validation.check_non_negative('margin_weight', margin_weight)
  return losses.MarginControlLoss(margin_weight=margin_weight)


def calibrated_loss(counts: str = 'batch') -> tf.keras.losses.Loss:
  """FedGA's label-calibrated loss, fedga paper eqs. (8)-(10) (SPEC 3).

  `counts="batch"` (default) counts classes in the current mini-batch, as the paper's Algorithm
  1 (line 5, "batch calibrated label") and the authors' code do; `counts="dataset"` uses the
  client's whole local dataset, counted by the client work in one extra pass before training.
  """
  from tff_conflict import losses  # pylint: disable=g-import-not-at-top
  _validation.check_choice('counts', counts, ('batch', 'dataset'))
  return losses.CalibratedLabelLoss(counts=counts)


LOSSES = {
    'ce': cross_entropy_loss,
    'focal': focal_loss,
    'margin': margin_loss,
    'calibrated': calibrated_loss,
}


def mean_aggregator() -> tff.aggregators.WeightedAggregationFactory:
  """FedAvg's weighted mean, `tff.aggregators.MeanFactory()`."""
  return tff.aggregators.MeanFactory()


def fedgh_aggregator(order: str = 'random', seed=None) -> tff.aggregators.WeightedAggregationFactory:
  """FedGH gradient harmonization (fedgh paper, Algorithm 1; SPEC 1)."""
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  _validation.check_choice('order', order, ('random', 'index'))
  return aggregators.GradientHarmonizationFactory(order=order, seed=seed)


def dgc_aggregator(selection_ratio: float = 0.5, weights_are_losses: bool = True
                   ) -> tff.aggregators.WeightedAggregationFactory:
  """FedMGC dominant gradient correction (fedmgc paper, Algorithms 1-2; SPEC 2b).

  Default lambda = 0.5, the paper's best selection ratio (Sec. V, Fig. 7). `weights_are_losses`
  defaults to True here (the method as published: `z_i = p_i / l_i` with the clients' mean
  training losses, sent by the loss-weighted client work); False treats every loss as equal.
  """
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  _validation.check_ratio('selection_ratio', selection_ratio)
  if not isinstance(weights_are_losses, bool):
    raise ValueError(f'weights_are_losses must be a bool, got {weights_are_losses!r}')
  return aggregators.DominantGradientCorrectionFactory(
      selection_ratio=selection_ratio, weights_are_losses=weights_are_losses)


def principal_aggregator(component_ratio: float = 0.8
                         ) -> tff.aggregators.WeightedAggregationFactory:
  """FedLD principal-gradient aggregation (fedld paper, eqs. 4-7; SPEC 4b).

  Default rho = 0.8: the paper keeps `L = 0.8 m` directions (Sec. 3.1).
  """
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  _validation.check_ratio('component_ratio', component_ratio)
  return aggregators.PrincipalGradientFactory(component_ratio=component_ratio)


def corrective_aggregator(alpha: float = 0.1) -> tff.aggregators.WeightedAggregationFactory:
  """Corrective gradient weights (corrective paper, eqs. 13, 29; SPEC 5).

  alpha in [0, 1] (paper eq. 12). Default alpha = 0.1 (SPEC 5; the paper's Table 2 range on IID FEMNIST is 0-0.1, Table 1 on
  non-IID 0-0.4; alpha = 0 is FedAvg).
  """
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  _validation.check_non_negative('alpha', alpha)
  if alpha > 1:  # eq. (12): alpha in [0, 1], a fraction of the clients' losses.
    raise ValueError(f'alpha must be in [0, 1], got {alpha!r}')
  return aggregators.CorrectiveGradientFactory(alpha=alpha)


AGGREGATORS = {
    'mean': mean_aggregator,
    'fedgh': fedgh_aggregator,
    'dgc': dgc_aggregator,
    'principal': principal_aggregator,
    'corrective': corrective_aggregator,
}


def is_corrective_factory(factory) -> bool:
  """Whether `factory` is a `tff_conflict.aggregators.CorrectiveGradientFactory`."""
  try:
    from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
    cls = aggregators.CorrectiveGradientFactory
  except (ImportError, AttributeError):
    return False
  return isinstance(factory, cls)


def weights_are_losses(factory) -> bool:
  """Whether `factory` reads its weight channel as client losses (DGC with
  `weights_are_losses=True`); such a factory needs `client_weighting="loss"`."""
  if hasattr(factory, 'weights_are_losses'):
    return bool(factory.weights_are_losses)
  try:
    from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
    cls = aggregators.DominantGradientCorrectionFactory
  except (ImportError, AttributeError):
    return False
  # The factory keeps the flag in a private attribute (no public accessor in tff_conflict 0.1).
  return isinstance(factory, cls) and bool(getattr(factory, '_weights_are_losses', False))
