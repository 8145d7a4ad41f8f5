"""The positive control: a published effect (FedProx against FedAvg on Synthetic(1, 1)) the harness
must reproduce before its other numbers are trusted.
"""

import dataclasses
import os
from typing import Any, Mapping, Optional

from experiments.benchmarking import config as config_lib

CONTROL_DIR = 'positive_control'


@dataclasses.dataclass(frozen=True)
class PositiveControl:
  """The control's settings (defaults: the FedProx paper's Synthetic(1, 1) experiment).

  Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127,
  Fig. 1-2: with many local epochs FedAvg's training loss oscillates or rises while FedProx with
  mu = 1 trains stably. The control runs both there, untuned, evaluating the global model's loss
  on the clients' training data every round, in `<root>/positive_control/` (docs/design.md,
  "The positive control").

  `data_seed`: the seed of the data every seed of the control uses (the paper's experiment has
  one dataset; seeds vary the initial model and the clients sampled); None: each seed draws its
  own data.
  """
  regime: str = 'synthetic(1,1)'
  baseline: str = 'fedavg'
  method: str = 'fedprox_mu1'
  epochs: int = 20
  rounds: int = 40
  clients_per_round: int = 10
  batch_size: int = 10
  client_learning_rate: float = 0.01
  data_seed: Optional[int] = 0

  @classmethod
  def from_config(cls, config: Mapping[str, Any]) -> 'PositiveControl':
    """The settings a control ran with, from its config.json (defaults for what it lacks)."""
    default = cls()
    config = config_lib.flat_settings(config)
    methods = list(config.get('methods') or ())
    return cls(
        regime=(config.get('regimes') or [default.regime])[0],
        baseline=config.get('baseline', default.baseline),
        method=next((m for m in methods if m != config.get('baseline', default.baseline)),
                    default.method),
        epochs=(config.get('epochs') or [default.epochs])[0],
        rounds=config.get('rounds', default.rounds),
        clients_per_round=config.get('clients_per_round', default.clients_per_round),
        batch_size=config.get('batch_size', default.batch_size),
        client_learning_rate=config.get('client_learning_rate', default.client_learning_rate),
        # Controls run before the data was held fixed drew each seed's data.
        data_seed=(None if config.get('vary_partition', True)
                   else config.get('data_seed', default.data_seed)))

  def describe(self) -> str:
    return (f'{self.method} against {self.baseline} on `{self.regime}`: E = {self.epochs}, '
            f'batch {self.batch_size}, client learning rate {self.client_learning_rate}, '
            f'{self.clients_per_round} clients per round, {self.rounds} rounds, untuned, '
            + ('each seed with its own data' if self.data_seed is None else
               f'the data of seed {self.data_seed} for every seed (seeds vary the initial model '
               'and the clients sampled)')
            + ', the global model\'s training loss evaluated every round')


def control_config(config: config_lib.BenchmarkConfig,
                   control: PositiveControl = PositiveControl()) -> config_lib.BenchmarkConfig:
  """The control as a benchmark under `config.root/positive_control`, with `config`'s seeds,
  runtime, outputs and data directories."""
  return dataclasses.replace(
      config, regimes=(control.regime,), methods=(control.baseline, control.method),
      epochs=(control.epochs,), models={}, datasets={}, model_fns={},
      baseline=control.baseline, detect={},
      vary_partition=control.data_seed is None,
      data=dataclasses.replace(config.data, data_seed=control.data_seed or 0),
      loop=dataclasses.replace(config.loop, rounds=control.rounds,
                               clients_per_round=control.clients_per_round,
                               batch_size=control.batch_size, eval_train_loss=True),
      client=dataclasses.replace(config.client, learning_rate=control.client_learning_rate,
                                 momentum=0.0),
      server=dataclasses.replace(config.server, learning_rate=1.0),
      tuning=dataclasses.replace(config.tuning, tune=False, tune_epochs=(), grids={}),
      output=dataclasses.replace(config.output, output_dir=config.root,
                                 experiment_name=CONTROL_DIR),
      description='Positive control: ' + control.describe() + '.')


def control_root(root: str) -> Optional[str]:
  """The control's directory under the benchmark `root`, if it has runs."""
  path = os.path.join(root, CONTROL_DIR)
  return path if os.path.exists(os.path.join(path, 'runs.csv')) else None
