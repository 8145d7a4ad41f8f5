"""Each paper's whole method as one call returning a `tff.learning.templates.LearningProcess`, every
builder with the same core keywords (docs/design.md, "Models and client work")."""

from collections.abc import Callable, Mapping
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict import _checks
from tff_conflict import hparams
from tff_conflict.learning import client_work as client_work_lib
from tff_conflict.learning import decorrelation as decorrelation_lib
from tff_conflict.learning import models as models_lib
from tff_conflict.learning import process as process_lib
from tff_conflict.learning import scaffold as scaffold_lib

KerasModelFn = Callable[[], tf.keras.Model]
Process = tff.learning.templates.LearningProcess


def _method_process(method: str, model_fn: models_lib.ModelArg, options: Mapping[str, Any],
                    **process_kwargs: Any) -> Process:
  """`build_process` with the loss and aggregator of `hparams.METHODS[method]`, each given its
  share of `options` (the builder's hyperparameter keywords and further `**options`); a
  `TypeError` names a keyword neither takes."""
  spec = hparams.METHODS[method]
  loss_kwargs, aggregator_kwargs = spec.split(f'build_{method}()', options)
  return process_lib.build_process(model_fn, loss=spec.loss, loss_kwargs=loss_kwargs,
                                   aggregator=spec.aggregator,
                                   aggregator_kwargs=aggregator_kwargs, **process_kwargs)


def build_fedavg(model_fn: models_lib.ModelArg, *,
                 input_spec: models_lib.InputSpecArg = None,
                 client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                 client_weighting: client_work_lib.WeightingArg = None,
                 metrics: models_lib.MetricsArg = None,
                 aggregator: process_lib.AggregatorArg = 'mean',
                 aggregator_kwargs: Optional[Mapping[str, Any]] = None,
                 proximal_strength: float = 0.0,
                 clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default) -> Process:
  """FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from
  Decentralized Data", AISTATS 2017, Algorithm 1): local SGD on cross-entropy (a Keras model) or
  the model's own loss, weighted mean of the deltas (weights `n_k / n`), applied with the server
  optimizer (default SGD, lr 1.0). Any model (docs/design.md, "Models and client work").

  Hyperparameters: none besides the optimizers; `client_weighting` 'num_examples' (default) or
  'uniform'; `aggregator` / `aggregator_kwargs` as every baseline builder and `clip_norm` as
  every builder (docs/design.md, "Models and client work").
  """
  return process_lib.build_process(
      model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss=None, aggregator=aggregator,
      aggregator_kwargs=aggregator_kwargs,
      client_weighting=client_weighting, metrics=metrics, proximal_strength=proximal_strength,
      clip_norm=clip_norm)


def build_fedprox(model_fn: models_lib.ModelArg, *,
                  input_spec: models_lib.InputSpecArg = None,
                  client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                  client_weighting: client_work_lib.WeightingArg = None,
                  metrics: models_lib.MetricsArg = None,
                  proximal_strength: float = hparams.PROXIMAL_STRENGTH.default,
                  aggregator: process_lib.AggregatorArg = 'mean',
                  aggregator_kwargs: Optional[Mapping[str, Any]] = None,
                  clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default) -> Process:
  """FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, eq. 2,
  Algorithm 2): each client minimizes `F_k(w) + mu/2 |w - w0|^2`, each local step using the
  gradient `grad F_k(w) + mu (w - w0)`; FedAvg aggregation.

  Hyperparameters: `proximal_strength` mu, a finite number >= 0, default 0.01
  (`hparams.PROXIMAL_STRENGTH`: the paper tunes mu in {0.001, 0.01, 0.1, 1}). Any model
  (docs/design.md, "Models and client work"). `build_fedavg` with a default mu. Not TFF 0.87's `build_weighted_fed_prox`, whose proximal gradient has
  the wrong sign (`mu (w0 - w)`, it pushes clients away from the global model); see
  `tff_conflict.learning.client_work`. `aggregator` (default 'mean') combines the proximal
  clients' deltas, e.g. 'fedgh' for FedProx + FedGH.
  """
  return build_fedavg(
      model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, client_weighting=client_weighting,
      metrics=metrics, aggregator=aggregator, aggregator_kwargs=aggregator_kwargs,
      proximal_strength=proximal_strength, clip_norm=clip_norm)


def build_fednova(model_fn: models_lib.ModelArg, *,
                  input_spec: models_lib.InputSpecArg = None,
                  client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                  client_weighting: client_work_lib.WeightingArg = None,
                  metrics: models_lib.MetricsArg = None,
                  aggregator: process_lib.AggregatorArg = 'mean',
                  aggregator_kwargs: Optional[Mapping[str, Any]] = None,
                  clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default) -> Process:
  """FedNova (Wang et al., "Tackling the Objective Inconsistency Problem in Heterogeneous
  Federated Optimization", NeurIPS 2020, arXiv 2007.07481, eqs. 6-7; docs/methods.md, FedNova):
  client i runs its tau_i local steps (its batches times epochs) and sends the normalised update
  `d_i = u_i / ||a_i||_1`; the server's aggregate is `tau_eff * sum_i p_i d_i`, `p_i = n_i / n`,
  `tau_eff = sum_i p_i ||a_i||_1`. `||a_i||_1` is tau_i for plain SGD,
  `(tau_i - rho (1 - rho^tau_i) / (1 - rho)) / (1 - rho)` with momentum rho, and
  `sum_{k<tau_i} (1 - eta mu)^k` with a proximal term mu at local lr eta, read from the client
  optimizer's hyperparameters in each round. With equal tau_i it is FedAvg. Any model.

  Hyperparameters: none of its own besides the optimizers: `client_optimizer_fn` must be
  `tff.learning.optimizers.build_sgdm` (with or without momentum; others are refused, their
  normalisation is unknown); `client_weighting` 'num_examples' (default) or 'uniform'; `aggregator`
  (default 'mean') combines the `d_i` with weights p_i and its result is multiplied by tau_eff,
  e.g. 'fedgh' for FedNova + FedGH; `clip_norm` as every builder. A client with 0 steps or a
  non-finite delta takes no part (weight 0). FedNova with FedProx's local objective is
  `build_process(..., proximal_strength=mu, normalized_averaging=True)`.
  """
  return process_lib.build_process(
      model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss=None, aggregator=aggregator,
      aggregator_kwargs=aggregator_kwargs, normalized_averaging=True,
      client_weighting=client_weighting, metrics=metrics, clip_norm=clip_norm)


def build_feddecorr(model_fn: KerasModelFn, *,
                    input_spec: models_lib.InputSpecArg = None,
                    client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                    client_weighting: client_work_lib.WeightingArg = None,
                    metrics: models_lib.MetricsArg = None,
                    beta: float = hparams.FEDDECORR_BETA.default,
                    form: str = hparams.FEDDECORR_FORM.default,
                    aggregator: process_lib.AggregatorArg = 'mean',
                    aggregator_kwargs: Optional[Mapping[str, Any]] = None,
                    clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default) -> Process:
  """FedDecorr (Shi et al., "Towards Understanding and Mitigating Dimensional Collapse in
  Heterogeneous Federated Learning", ICLR 2023, arXiv 2210.00226; docs/methods.md, FedDecorr):
  clients train on `CE + beta L_decorr(z)`, z the batch's representations, the input of the
  model's last (Dense classifier) layer (`tff_conflict.losses.decorrelation_loss`); FedAvg
  aggregation, or `aggregator` (e.g. 'fedgh' for FedDecorr + FedGH). Needs a Sequential or
  functional Keras model whose last layer is `tf.keras.layers.Dense`, with a trainable layer
  before it (else z is the input, the term has no gradient and FedDecorr is FedAvg:
  `decorrelation.check_trained_representation`).

  Hyperparameters (`tff_conflict.hparams`): `beta` >= 0, default 0.1 (the FedGH paper's value;
  the FedDecorr paper's range 0.01-0.1); `form` 'authors' (default, the authors' code: the mean
  squared off-diagonal entry of `z^T z` over N, z standardised) or 'paper' (`||K||_F^2 / m^2`,
  K the correlation matrix); `aggregator` / `aggregator_kwargs` and `clip_norm` as every
  baseline builder. The model's weights are the given model's, in its order.

  Raises:
    ValueError: as `build_process`, and for a model that is not such a Keras model, or whose
      classifier reads the input.
  """
  beta = hparams.FEDDECORR_BETA.check(beta)
  form = hparams.FEDDECORR_FORM.check(form)
  resolved = models_lib.resolve_model(model_fn, input_spec)
  if resolved.kind != models_lib.KERAS:
    raise _checks.ArgumentError(argument='model_fn', value=model_fn, message=(
        'FedDecorr adds a term on the representations feeding the model\'s last '
        'layer and needs model_fn returning a Keras model, got '
        f'{resolved.description}'))
  decorrelation_lib.check_decorrelatable(resolved.keras_model_fn, resolved.input_spec)
  return process_lib.build_process(
      decorrelation_lib.decorrelated_model_fn(
          resolved.keras_model_fn, resolved.input_spec, num_classes=resolved.num_classes,
          metrics_fn=models_lib.resolve_metrics(metrics), beta=beta, form=form),
      client_optimizer_fn=client_optimizer_fn, server_optimizer_fn=server_optimizer_fn,
      aggregator=aggregator, aggregator_kwargs=aggregator_kwargs,
      client_weighting=client_weighting, clip_norm=clip_norm)


def build_fedgh(model_fn: models_lib.ModelArg, *,
                input_spec: models_lib.InputSpecArg = None,
                client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                client_weighting: client_work_lib.WeightingArg = None,
                metrics: models_lib.MetricsArg = None,
                order: str = hparams.FEDGH_ORDER.default,
                seed: Optional[int] = hparams.FEDGH_SEED.default,
                proximal_strength: float = 0.0,
                clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default,
                **options: Any) -> Process:
  """FedGH ("Tackling the Non-IID Issue in Heterogeneous Federated Learning by Gradient
  Harmonization", Algorithm 1; docs/methods.md, FedGH): local SGD on cross-entropy (a Keras
  model) or the model's own loss; at the server each client delta is projected off every other
  ORIGINAL delta it conflicts with (negative inner product), then the weighted mean
  `sum_k n_k/n u_k`. Any model (docs/design.md, "Models and client work").

  Hyperparameters: `order` of the other clients, 'random' (default, the paper's random order,
  drawn per round from `seed`) or 'index' (`hparams.FEDGH_ORDER`); `seed`, None (default) or an
  int64 integer (`hparams.FEDGH_SEED`). The paper trains locally with SGD, momentum 0.9, lr 0.01,
  batch 64, E = 5 (CIFAR) or 1 (LEAF) local epochs (Table I). `**options`: any further
  hyperparameter of its aggregator (`hparams.METHODS['fedgh']`).
  """
  return _method_process(
      'fedgh', model_fn, dict(options, order=order, seed=seed), input_spec=input_spec,
      client_optimizer_fn=client_optimizer_fn, server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting, metrics=metrics, proximal_strength=proximal_strength,
      clip_norm=clip_norm)


def build_fedmgc(model_fn: models_lib.ModelArg, *,
                 input_spec: models_lib.InputSpecArg = None,
                 client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                 client_weighting: client_work_lib.WeightingArg = None,
                 metrics: models_lib.MetricsArg = None,
                 gamma: float = hparams.FOCAL_GAMMA.default,
                 beta: float = hparams.FOCAL_BETA.default,
                 selection_ratio: float = hparams.DGC_SELECTION_RATIO.default,
                 proximal_strength: float = 0.0,
                 clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default,
                 **options: Any) -> Process:
  """FedMGC ("Joint Focal Loss and Dominant Gradient Correction for Gradient Conflict in Federated
  Learning"; docs/methods.md, FedMGC). Needs a Keras model (it replaces the loss).

  Clients train on the focal loss `-beta (1 - p_t)^gamma log p_t` (eq. 10) and send their delta
  with their mean training loss of this round as weight (`build_loss_weighted_client_work`); the
  server runs dominant gradient correction with `z_i = p_i / l_i` (Algorithms 1-2,
  `DominantGradientCorrectionFactory(weights_are_losses=True)`) and takes the unweighted mean of
  the corrected deltas (Algorithm 2 line 9).

  Hyperparameters (`tff_conflict.hparams`): `gamma`, a finite number >= 0, default 0.5, and
  `beta`, a finite number > 0, default 1.0 -- the paper tunes gamma in {0.1, 0.2, 0.5, 1.0} and
  beta in {1.0, 1.2, 1.5, 2.0} per dataset (Sec. V-A 2) without a single default;
  `selection_ratio` lambda in (0, 1], default 0.5, the paper's best (Fig. 7). To run DGC with a
  model that is not Keras (its own loss), use `build_process(model_fn, aggregator='dgc')`.
  `client_weighting` must be 'loss' (the default). The paper trains locally with SGD, lr 0.001,
  batch 128, 10 local epochs. `**options`: any further hyperparameter of its loss or
  aggregator (`hparams.METHODS['fedmgc']`).
  """
  return _method_process(
      'fedmgc', model_fn, dict(options, gamma=gamma, beta=beta, selection_ratio=selection_ratio),
      input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, client_weighting=client_weighting,
      metrics=metrics, proximal_strength=proximal_strength, clip_norm=clip_norm)


def build_fedga(model_fn: models_lib.ModelArg, *,
                input_spec: models_lib.InputSpecArg = None,
                client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                client_weighting: client_work_lib.WeightingArg = None,
                metrics: models_lib.MetricsArg = None,
                counts: str = hparams.CALIBRATION_COUNTS.default,
                form: str = hparams.CALIBRATION_FORM.default,
                proximal_strength: float = 0.0,
                clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default,
                **options: Any) -> Process:
  """FedGA ("FedGA: Federated Learning with Gradient Alignment for Error Asymmetry Mitigation",
  eqs. 8-10, Algorithm 1; docs/methods.md, FedGA): clients train on the calibrated-label loss with
  targets `q_j = 1`, `q_i = (N_j - N_i)/N_j p_i`; FedAvg aggregation. Needs a Keras model (it
  replaces the loss).

  Hyperparameters (`tff_conflict.hparams`): `counts` 'batch' (default: the mini-batch's class
  counts, Algorithm 1 line 5 and the authors' code) or 'dataset' (the client's whole local
  dataset, one extra pass before training); `form` 'soft_target' (default, the authors' code:
  the soft-target cross-entropy `-sum_i q_i log p_i`, gradient `(sum q) p - q`, invariant to a
  common shift of the logits) or 'paper' (eq. 8 literally, gradient `p - q`; see
  `tff_conflict.losses.CalibratedLabelLoss`); `clip_norm` as every builder (the authors' code
  clips every method at 5.0); `**options`: any further hyperparameter of its loss
  (`hparams.METHODS['fedga']`).
  """
  return _method_process(
      'fedga', model_fn, dict(options, counts=counts, form=form), input_spec=input_spec,
      client_optimizer_fn=client_optimizer_fn, server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting, metrics=metrics, proximal_strength=proximal_strength,
      clip_norm=clip_norm)


def build_fedld(model_fn: models_lib.ModelArg, *,
                input_spec: models_lib.InputSpecArg = None,
                client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                client_weighting: client_work_lib.WeightingArg = None,
                metrics: models_lib.MetricsArg = None,
                margin_weight: float = hparams.MARGIN_WEIGHT.default,
                margin_form: str = hparams.MARGIN_FORM.default,
                component_ratio: float = hparams.PRINCIPAL_COMPONENT_RATIO.default,
                preserve_norms: bool = hparams.PRINCIPAL_PRESERVE_NORMS.default,
                granularity: str = hparams.PRINCIPAL_GRANULARITY.default,
                first_round_plain_mean: bool = hparams.PRINCIPAL_FIRST_ROUND_PLAIN_MEAN.default,
                revision: str = hparams.PRINCIPAL_REVISION.default,
                proximal_strength: float = 0.0,
                clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default,
                **options: Any) -> Process:
  """FedLD ("Tackling Data Heterogeneity in Federated Learning via Loss Decomposition";
  docs/methods.md, FedLD): margin control + principal-gradient aggregation. Needs a Keras model
  (it replaces the loss); the principal-gradient server alone, with any model, is
  `build_process(model_fn, aggregator='principal')`.

  Clients train on `CE + lambda log(1 + |z|^2)` (eq. 3, z the logits); the server revises each
  delta in the principal coordinate system of the top `max(1, floor(rho K))` eigen-directions
  of `U U^T / K` (eqs. 4-7), for each model tensor separately by default, and takes the weighted
  mean `sum_i n_i/n u_i`.

  Hyperparameters (`tff_conflict.hparams`): `margin_weight` lambda >= 0, default 0.01 (the
  paper's value on COVID-FL; 0.1, 0.03, 0.03 on Retina splits 1-3, Sec. 3.1); `margin_form`
  'logits' (default, eq. 3) or 'batch_probabilities' (the authors' code, which runs it with
  lambda 0.03); `component_ratio` rho in (0, 1], default 0.8 (`L = 0.8 m`, Sec. 3.1);
  `preserve_norms`, default False (eq. 7 as the authors' code), True rescales each revised
  update to the original's length; `granularity` 'tensor' (default, the authors' per-tensor
  `pcgrad_svd`) or 'model' (the paper's one matrix of whole-model updates);
  `first_round_plain_mean`, default False, True aggregates the first round with the plain mean
  as the authors' code; `revision` 'eigenvalue_share' (default, eq. 7) or 'projection' (the
  plain projection on the kept directions, a diagnosis); `clip_norm` as every builder;
  `**options`: any further hyperparameter of its loss or aggregator (`hparams.METHODS['fedld']`).
  The authors' uniform final mean is `client_weighting='uniform'`. The paper trains with SGD,
  lr 0.01 (Retina) / 0.005 (COVID-FL), batch 50, 1 local epoch.
  """
  return _method_process(
      'fedld', model_fn,
      dict(options, margin_weight=margin_weight, margin_form=margin_form,
           component_ratio=component_ratio, preserve_norms=preserve_norms,
           granularity=granularity, first_round_plain_mean=first_round_plain_mean,
           revision=revision),
      input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, client_weighting=client_weighting,
      metrics=metrics, proximal_strength=proximal_strength, clip_norm=clip_norm)


def build_fed_corrective(model_fn: models_lib.ModelArg, *,
                         input_spec: models_lib.InputSpecArg = None, client_optimizer_fn: Any,
                         server_optimizer_fn: Any = None,
                         client_weighting: client_work_lib.WeightingArg = None,
                         metrics: models_lib.MetricsArg = None,
                         alpha: float = hparams.CORRECTIVE_ALPHA.default,
                         proximal_strength: float = 0.0,
                         clip_norm: Optional[float] = hparams.CLIENT_CLIP_NORM.default,
                         **options: Any) -> Process:
  """Corrective gradient weights ("A Novel Approach for Improving Generalization in Federated
  Learning Through Corrective Gradient Weights", eqs. 3-8, 13, 24-29; docs/methods.md,
  corrective gradient weights). Any model (docs/design.md, "Models and client work").

  Clients train as in FedAvg, then send their delta, the gradient `D_i` of their mean local
  loss at the trained model over the whole local dataset (an extra pass) and that loss `L_i`;
  the server computes `x_i = c / sqrt(sum_j (m_j/|D_j|)^2) * m_i / |D_i|^2` with
  `m_i = D_i . sum_j D_j`, `c = min_i alpha L_i / |D_i|`, and the aggregate
  `sum_k n_k/n u_k + sum_i x_i D_i` (the new model is `W_FedAvg - sum_i x_i D_i`).

  Hyperparameters: `alpha` in [0, 1] (eq. 12), default 0.1 (`hparams.CORRECTIVE_ALPHA`);
  alpha = 0 is exactly FedAvg (paper Sec. 4).
  `client_weighting` must be 'num_examples' (the default). `**options`: any further
  hyperparameter of its aggregator (`hparams.METHODS['fed_corrective']`).
  """
  return _method_process(
      'fed_corrective', model_fn, dict(options, alpha=alpha), input_spec=input_spec,
      client_optimizer_fn=client_optimizer_fn, server_optimizer_fn=server_optimizer_fn,
      client_weighting=client_weighting, metrics=metrics, proximal_strength=proximal_strength,
      clip_norm=clip_norm)


ALGORITHMS = {
    'fedavg': build_fedavg,
    'fedprox': build_fedprox,
    'fednova': build_fednova,
    'feddecorr': build_feddecorr,
    'fedgh': build_fedgh,
    'fedmgc': build_fedmgc,
    'fedga': build_fedga,
    'fedld': build_fedld,
    'fed_corrective': build_fed_corrective,
    'scaffold': scaffold_lib.build_scaffold,
}
