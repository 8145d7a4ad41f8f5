"""Each paper's whole method as one call returning a `tff.learning.templates.LearningProcess`.

Every builder is a thin wrapper of `build_process` with the same core keywords,

    build_X(keras_model_fn, *, input_spec, client_optimizer_fn, server_optimizer_fn=None,
            client_weighting=None, metrics=None, <method hyperparameters>)

so that a binary can call any entry of `ALGORITHMS` the same way. Defaults of the method
hyperparameters are the papers' (cited per builder). The papers' local-training settings
(optimizer, learning rate, batch size, epochs) are the caller's `client_optimizer_fn` and data
pipeline; each docstring lists them for reference.
"""

from collections.abc import Callable, Mapping
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_conflict.learning import client_work as client_work_lib
from tff_conflict.learning import models as models_lib
from tff_conflict.learning import process as process_lib

KerasModelFn = Callable[[], tf.keras.Model]
Process = tff.learning.templates.LearningProcess


def build_fedavg(keras_model_fn: KerasModelFn, *, input_spec: Mapping[str, tf.TensorSpec],
                 client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                 client_weighting: client_work_lib.WeightingArg = None,
                 metrics: models_lib.MetricsArg = None) -> Process:
  """FedAvg (McMahan et al., "Communication-Efficient Learning of Deep Networks from
  Decentralized Data", AISTATS 2017, Algorithm 1): local SGD on cross-entropy, weighted mean of
  the deltas (weights `n_k / n`), applied with the server optimizer (default SGD, lr 1.0).

  Hyperparameters: none besides the optimizers; `client_weighting` 'num_examples' (default) or
  'uniform'.
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='ce', aggregator='mean',
      client_weighting=client_weighting, metrics=metrics)


def build_fedprox(keras_model_fn: KerasModelFn, *, input_spec: Mapping[str, tf.TensorSpec],
                  client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                  client_weighting: client_work_lib.WeightingArg = None,
                  metrics: models_lib.MetricsArg = None,
                  proximal_strength: float = 0.01) -> Process:
  """FedProx (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, eq. 2,
  Algorithm 2): each client minimizes `F_k(w) + mu/2 |w - w0|^2`, each local step using the
  gradient `grad F_k(w) + mu (w - w0)`; FedAvg aggregation.

  Hyperparameters: `proximal_strength` mu >= 0, default 0.01 (the paper tunes mu in
  {0.001, 0.01, 0.1, 1}). Not TFF 0.87's `build_weighted_fed_prox`, whose proximal gradient has
  the wrong sign (`mu (w0 - w)`, it pushes clients away from the global model); see
  `tff_conflict.learning.client_work`.
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='ce', aggregator='mean',
      proximal_strength=proximal_strength, client_weighting=client_weighting, metrics=metrics)


def build_fedgh(keras_model_fn: KerasModelFn, *, input_spec: Mapping[str, tf.TensorSpec],
                client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                client_weighting: client_work_lib.WeightingArg = None,
                metrics: models_lib.MetricsArg = None,
                order: str = 'random', seed: Optional[int] = None) -> Process:
  """FedGH (fedgh paper, "FedGH: ... Gradient Harmonization", Algorithm 1; SPEC 1): local SGD on
  cross-entropy; at the server each client delta is projected off every other ORIGINAL delta it
  conflicts with (negative inner product), then the weighted mean `sum_k n_k/n u_k`.

  Hyperparameters: `order` of the other clients, 'random' (default, the paper's random order,
  drawn per round from `seed`) or 'index'; `seed` (default None). The paper trains locally with
  SGD, momentum 0.9, lr 0.01, batch 64, E = 5 (CIFAR) or 1 (LEAF) local epochs (Table I).
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='ce', aggregator='fedgh',
      aggregator_kwargs=dict(order=order, seed=seed), client_weighting=client_weighting,
      metrics=metrics)


def build_fedmgc(keras_model_fn: KerasModelFn, *, input_spec: Mapping[str, tf.TensorSpec],
                 client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                 client_weighting: client_work_lib.WeightingArg = None,
                 metrics: models_lib.MetricsArg = None,
                 gamma: float = 0.5, beta: float = 1.0,
                 selection_ratio: float = 0.5) -> Process:
  """FedMGC (fedmgc paper: focal loss + dominant gradient correction; SPEC 2).

  Clients train on the focal loss `-beta (1 - p_t)^gamma log p_t` (eq. 10) and send their delta
  with their mean training loss of this round as weight (`build_loss_weighted_client_work`); the
  server runs dominant gradient correction with `z_i = p_i / l_i` (Algorithms 1-2,
  `DominantGradientCorrectionFactory(weights_are_losses=True)`) and takes the unweighted mean of
  the corrected deltas (Algorithm 2 line 9).

  Hyperparameters: `gamma` >= 0 and `beta` >= 0 -- the paper tunes gamma in {0.1, 0.2, 0.5, 1.0}
  and beta in {1.0, 1.2, 1.5, 2.0} per dataset (Sec. V-A 2) without a single default; defaults
  0.5 and 1.0 are inside that grid. `selection_ratio` lambda in (0, 1], default 0.5, the
  paper's best (Fig. 7). `client_weighting` must be 'loss' (the default). The paper trains
  locally with SGD, lr 0.001, batch 128, 10 local epochs.
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='focal',
      loss_kwargs=dict(gamma=gamma, beta=beta), aggregator='dgc',
      aggregator_kwargs=dict(selection_ratio=selection_ratio, weights_are_losses=True),
      client_weighting=client_weighting, metrics=metrics)


def build_fedga(keras_model_fn: KerasModelFn, *, input_spec: Mapping[str, tf.TensorSpec],
                client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                client_weighting: client_work_lib.WeightingArg = None,
                metrics: models_lib.MetricsArg = None, counts: str = 'batch') -> Process:
  """FedGA (fedga paper, gradient alignment by label calibration, eqs. 8-10, Algorithm 1;
  SPEC 3): clients train on the calibrated-label loss, whose gradient with respect to the logits
  is `p - q` with `q_j = 1`, `q_i = (N_j - N_i)/N_j p_i`; FedAvg aggregation.

  Hyperparameters: `counts` -- 'batch' (default: class counts of the current mini-batch, as the
  paper's Algorithm 1 line 5 and the authors' code) or 'dataset' (the client's whole local
  dataset, counted in one extra pass before training).
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='calibrated',
      loss_kwargs=dict(counts=counts), aggregator='mean', client_weighting=client_weighting,
      metrics=metrics)


def build_fedld(keras_model_fn: KerasModelFn, *, input_spec: Mapping[str, tf.TensorSpec],
                client_optimizer_fn: Any, server_optimizer_fn: Any = None,
                client_weighting: client_work_lib.WeightingArg = None,
                metrics: models_lib.MetricsArg = None, margin_weight: float = 0.01,
                component_ratio: float = 0.8) -> Process:
  """FedLD (fedld paper: margin control + principal-gradient aggregation; SPEC 4).

  Clients train on `CE + lambda log(1 + |z|^2)` (eq. 3, z the logits); the server revises each
  delta in the principal coordinate system of the top `max(1, floor(rho K))` eigen-directions
  of `U U^T / K` (eqs. 4-7) and takes the weighted mean `sum_i n_i/n u_i`.

  Hyperparameters: `margin_weight` lambda >= 0, default 0.01 (the paper's value on COVID-FL;
  0.1, 0.03, 0.03 on Retina splits 1-3, Sec. 3.1); `component_ratio` rho in (0, 1], default
  0.8 (`L = 0.8 m`, Sec. 3.1). The paper trains with SGD, lr 0.01 (Retina) / 0.005 (COVID-FL),
  batch 50, 1 local epoch.
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='margin',
      loss_kwargs=dict(margin_weight=margin_weight), aggregator='principal',
      aggregator_kwargs=dict(component_ratio=component_ratio),
      client_weighting=client_weighting, metrics=metrics)


def build_fed_corrective(keras_model_fn: KerasModelFn, *,
                         input_spec: Mapping[str, tf.TensorSpec], client_optimizer_fn: Any,
                         server_optimizer_fn: Any = None,
                         client_weighting: client_work_lib.WeightingArg = None,
                         metrics: models_lib.MetricsArg = None, alpha: float = 0.1) -> Process:
  """Corrective gradient weights (corrective paper, eqs. 3-8, 13, 24-29; SPEC 5).

  Clients train as in FedAvg, then send their delta, the gradient `D_i` of their mean local
  loss at the trained model over the whole local dataset (an extra pass) and that loss `L_i`;
  the server computes `x_i = c / sqrt(sum_j (m_j/|D_j|)^2) * m_i / |D_i|^2` with
  `m_i = D_i . sum_j D_j`, `c = min_i alpha L_i / |D_i|`, and the aggregate
  `sum_k n_k/n u_k + sum_i x_i D_i` (the new model is `W_FedAvg - sum_i x_i D_i`).

  Hyperparameters: `alpha` in [0, 1], default 0.1; alpha = 0 is exactly FedAvg (paper Sec. 4).
  `client_weighting` must be 'num_examples' (the default).
  """
  return process_lib.build_process(
      keras_model_fn, input_spec=input_spec, client_optimizer_fn=client_optimizer_fn,
      server_optimizer_fn=server_optimizer_fn, loss='ce', aggregator='corrective',
      aggregator_kwargs=dict(alpha=alpha), client_weighting=client_weighting, metrics=metrics)


ALGORITHMS = {
    'fedavg': build_fedavg,
    'fedprox': build_fedprox,
    'fedgh': build_fedgh,
    'fedmgc': build_fedmgc,
    'fedga': build_fedga,
    'fedld': build_fedld,
    'fed_corrective': build_fed_corrective,
}
