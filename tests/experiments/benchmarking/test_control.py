"""The positive control's benchmark: FedProx's published setting, the outer benchmark's seeds."""

from experiments import config as experiment_config
from experiments.benchmarking import config as config_lib
from experiments.benchmarking import control


def test_control_config_is_the_fedprox_papers_setting(tmp_path):
  outer = config_lib.BenchmarkConfig(
      regimes=('digits:iid',), methods=('fedavg', 'fedgh'), epochs=(1, 5), report_seeds=(3, 4),
      loop=experiment_config.LoopConfig(rounds=20, clients_per_round=5, batch_size=20),
      client=experiment_config.ClientConfig(learning_rate=0.1, momentum=0.5),
      models={'digits': 'mlp'}, runtime=experiment_config.RuntimeConfig('cpp'),
      output=experiment_config.OutputConfig(output_dir=str(tmp_path), experiment_name='results'),
      tuning=config_lib.TuningConfig(tune=True, tuning_seeds=(100,), tune_epochs=(1,),
                                     grids={'fedgh': {'order': ('random',)}}))
  inner = control.control_config(outer)
  # The outer benchmark's grids name its own methods, not the control's (replace validates).
  assert inner.tuning.grids == {}
  assert inner.regimes == ('synthetic(1,1)',)
  assert inner.methods == ('fedavg', 'fedprox_mu1') and inner.baseline == 'fedavg'
  assert inner.epochs == (20,) and inner.loop.rounds == 40 and inner.loop.batch_size == 10
  assert inner.loop.clients_per_round == 10 and inner.client.learning_rate == 0.01
  assert inner.client.momentum == 0.0 and inner.server.learning_rate == 1.0
  assert not inner.tuning.tune and inner.loop.eval_train_loss
  # One dataset for every seed, as in the paper: seeds vary the model and the clients sampled.
  assert not inner.vary_partition and inner.data.data_seed == 0
  assert inner.report_seeds == (3, 4) and inner.runtime.runtime == 'cpp'
  assert inner.root == str(tmp_path / 'results' / 'positive_control')
  assert control.control_root(outer.root) is None
  (tmp_path / 'results' / 'positive_control').mkdir(parents=True)
  (tmp_path / 'results' / 'positive_control' / 'runs.csv').write_text('x\n')
  assert control.control_root(outer.root) == inner.root


def test_settings_read_back_from_the_controls_config(tmp_path):
  outer = config_lib.BenchmarkConfig(
      regimes=('digits:iid',), methods=('fedavg',),
      output=experiment_config.OutputConfig(output_dir=str(tmp_path)))
  inner = control.control_config(outer, control.PositiveControl(epochs=10, rounds=30))
  settings = control.PositiveControl.from_config(config_lib.as_dict(inner))
  assert settings == control.PositiveControl(epochs=10, rounds=30)
  # A control run before the data was held fixed: each seed drew its own data.
  assert control.PositiveControl.from_config({}) == control.PositiveControl(data_seed=None)
