"""The binaries' presets as data: name -> flag values (`--preset`; flags given explicitly win),
and the benchmark's positive control; why each is sized so: docs/experiments.md, "Presets"."""

_SEEDS = [str(s) for s in range(10)]
_TUNED = dict(models='digits:mlp', tune=True, tuning_seeds=['100'], runtime='inprocess')

# The diagnosis variants (`benchmarking.methods.VARIANTS`) beside their parents.
DIAGNOSIS_METHODS = ('fedavg', 'fedga', 'fedld', 'fedmgc', 'fed_corrective', 'fedga_paper',
                     'fedga_clip', 'fedga_paper_clip', 'fedavg_clip', 'fedld_projection',
                     'fedld_model', 'fedld_preserve_norms', 'fedld_margin_only',
                     'fedld_principal_only', 'fedmgc_focal_only', 'fedmgc_dgc_only',
                     'fedavg_uniform', 'fed_corrective_alpha1')


# The real-data comparison: the five methods, the baselines, FedGH on each baseline (`fedgh` is
# FedGH on FedAvg) and the compositions of the methods' halves with FedGH.
# Shakespeare by speaker at a CPU's size: the first 100 roles, 64 training windows each at most,
# 150 test windows each at most (10,230 in all: one evaluation's sampling error under 0.005).
SHAKESPEARE_REGIME = 'leaf_shakespeare:natural(max=64,test=150)@100'

REAL_DATA_METHODS = (
    'fedavg,fedprox,fednova,scaffold,feddecorr,fedgh,fedprox+fedgh,fednova+fedgh,scaffold+fedgh,'
    'feddecorr+fedgh,fedmgc,fedga,fedld,fed_corrective,custom[loss=calibrated,aggregator=fedgh],'
    'custom[loss=focal,aggregator=fedgh],custom[loss=margin,aggregator=fedgh]')


def _paper(name: str, regimes: str, methods: str, epochs: int, tuning_regimes: str,
           description: str, rounds: int = 100, **loop) -> dict:
  return dict(_TUNED, regimes=regimes, methods=methods, epochs=[str(epochs)],
              tune_epochs=[str(epochs)], report_seeds=['0', '1', '2'], rounds=rounds,
              tuning_regimes=tuning_regimes, experiment_name=name, description=description,
              **loop)


# FedGH's Table II: each baseline without and with FedGH.
_FEDGH_METHODS = ('fedavg,fedavg+fedgh,fedprox,fedprox+fedgh,fednova,fednova+fedgh,feddecorr,'
                  'feddecorr+fedgh')

# One preset per paper table, in the paper's setting at its full size (a GPU's or a cluster's;
# the sizes run on a CPU and the costs: docs/experiments.md, "The papers' comparisons"); the
# client learning-rate grid is centred on the paper's rate.
PAPER_TABLES = {
    'fedgh_table': _paper(
        'fedgh_table', 'fashion_mnist:dir(0.1)@20,fashion_mnist:dir(1.0)@20', _FEDGH_METHODS, 5,
        'fashion_mnist:fashion_mnist:dir(0.1)@20',
        'The FedGH paper\'s Table II (`--preset=fedgh_table`) in its Table I CIFAR-10 setting on '
        'Fashion-MNIST: 20 clients, all per round, E = 5, batch 64, SGD momentum 0.9, 100 '
        'rounds, Dirichlet 0.1 and 1.0; the two-convolution CNN of Reddi et al. (`emnist_cnn`).',
        clients_per_round=20, client_batch_size=64, client_momentum=0.9,
        client_lr_grid=['0.003', '0.01', '0.03'], models='fashion_mnist:emnist_cnn'),
    # Apart from fedgh_table: a benchmark's rounds, cohort, epochs, batch and momentum are global,
    # and Table I's Shakespeare values differ from its CIFAR-10 ones in all five.
    'fedgh_table_shakespeare': _paper(
        'fedgh_table_shakespeare', 'leaf_shakespeare:natural@660', _FEDGH_METHODS, 1,
        'leaf_shakespeare:leaf_shakespeare:natural@660',
        'The FedGH paper\'s Table II on Shakespeare (`--preset=fedgh_table_shakespeare`, '
        '--leaf_dir) in its Table I setting: 660 roles, 50 per round, E = 1, batch 64, lr 1.0, '
        '50 rounds, LEAF\'s LSTM (`leaf_shakespeare_lstm`).',
        rounds=50, clients_per_round=50, client_batch_size=64,
        client_lr_grid=['0.3', '1', '3'], models='leaf_shakespeare:leaf_shakespeare_lstm'),
    'fedmgc_table': _paper(
        'fedmgc_table', 'fashion_mnist:client_dir(0.5)@100,fashion_mnist:client_dir(1.0)@100',
        'fedavg,fedprox,fednova,fedmgc', 10, 'fashion_mnist:fashion_mnist:client_dir(0.5)@100',
        'The FedMGC paper\'s FMNIST comparison (`--preset=fedmgc_table`, its Figs. 11-12): 100 '
        'clients of equal size, 10 per round, Dir(alpha p) with alpha 0.5 and 1, E = 10, batch '
        '128, lr 0.001, 400 rounds, its CNN (`fedmgc_fmnist_cnn`).',
        rounds=400, clients_per_round=10, client_batch_size=128,
        client_lr_grid=['0.0003', '0.001', '0.003'], models='fashion_mnist:fedmgc_fmnist_cnn'),
    'fedld_table': _paper(
        'fedld_table', 'digits:dir(100)@5,digits:dir(0.5)@5,digits:dir(0.1)@5',
        'fedavg,fedprox,fedgh,fedld', 1, 'digits:digits:dir(0.1)@5',
        'The FedLD paper\'s Table 1 (`--preset=fedld_table`) on digits, 100 rounds.',
        clients_per_round=5, client_batch_size=50),
    # Untuned, at the values of `Xiao-Chenguang/FedGA`'s configs/sgd-param.csv (FedGA: defaults).
    'fedga_table': dict(_paper(
        'fedga_table',
        ','.join(f'mnist:client_dir({a})@100' for a in ('0.05', '0.1', '0.5', '1', '10')),
        'fedavg,fedprox,fedga', 2, '',
        'The FedGA paper\'s Table 1 on MNIST (`--preset=fedga_table --data_dir=DIR`) in the '
        'authors\' code\'s setting, untuned: 100 clients of equal size with per-client '
        'Dirichlet(alpha) class mixes, alpha 0.05, 0.1, 0.5, 1, 10, 10 per round, E = 2, batch 64, '
        'client SGD lr 0.1 without momentum, server lr 1, 100 rounds, the 784-128-10 ReLU MLP '
        'initialised as PyTorch\'s nn.Linear (`torch_mlp`), FedProx mu 0.001, FedGA\'s per-batch '
        'soft-target labels, every client step clipped at global norm 5 as the authors clip every '
        'method\'s (proximal gradient included); 5 seeds.',
        clients_per_round=10, client_batch_size=64, models='mnist:torch_mlp'),
        tune=False, report_seeds=_SEEDS[:5], client_learning_rate=0.1, server_learning_rate=1.0,
        proximal_strength=0.001, client_clip_norm=5.0),
}

BENCHMARK = {
    'smoke': dict(regimes='digits:iid@8,digits:#C=2@8', methods='fedavg,fedgh', epochs=['1'],
                  report_seeds=['0', '1'], rounds=3, clients_per_round=4, client_batch_size=32,
                  models='digits:logistic_regression', tune=False, experiment_name='smoke'),
    'results': dict(
        _TUNED, regimes='digits:dir(0.1),digits:#C=2,synthetic(1,1),digits:dir(0.1)@50,'
        'digits:#C=1',
        methods='fedavg,fedprox,fednova,scaffold,feddecorr,fedavg+fedgh,fedprox+fedgh,fedgh,'
        'fedmgc,fedga,fedld,fed_corrective,custom[loss=calibrated,aggregator=fedgh],'
        'custom[loss=focal,aggregator=fedgh],custom[loss=margin,aggregator=fedgh]',
        epochs=['1'], report_seeds=_SEEDS, rounds=50, clients_per_round=10,
        client_batch_size=20, tune_server_lr=True, eval_train_loss=True,
        primary_statistic='last_k_accuracy', experiment_name='results', positive_control=True,
        models='digits:mlp,synthetic:mlp',   # FedDecorr needs a hidden layer (not logistic)
        description='The results preset (`--preset=results`, docs/experiments.md): the seeds\' '
        'baselines, every method at its defaults and the compositions of the methods\' halves '
        'with FedGH, 10 reporting seeds, one tuning seed, 50 rounds, E = 1.'),
    # Rounds from each regime's pilot (docs/results/pilots/horizons.md, `tools.pilot_horizon`):
    # FedAvg tuned on the regime itself for 300 rounds; the first 50-round window of validation
    # accuracy gaining less than 0.02 over the one before ends the horizon, the dataset's the
    # longest of its regimes'.
    'real_data': dict(
        _TUNED, regimes=f'fashion_mnist:dir(0.1)@100,fashion_mnist:#C=2@100,{SHAKESPEARE_REGIME},'
        'digits:dir(0.1)',
        methods=REAL_DATA_METHODS, epochs=['1'], report_seeds=_SEEDS,
        tuning_seeds=['100', '101', '102'], rounds=200, clients_per_round=10,
        client_batch_size=20, tune_server_lr=True, tuning_strategy='product',
        tuning_schedule='halving', tune_method_grids=False, tuning_edge_steps=3,
        tune_each_regime=True, tuning_last_k=20,
        family_methods='fedgh,fedmgc,fedga,fedld,fed_corrective',
        client_lr_grid=['0.03', '0.1', '0.3'], server_lr_grid=['0.5', '1', '2'],
        dataset_settings='leaf_shakespeare.client_lr_grid=0.3/1/3,digits.rounds=150',
        plateau_window=50, plateau_tolerance=0.02,
        models='fashion_mnist:small_mlp,leaf_shakespeare:shakespeare_gru,digits:mlp',
        primary_statistic='last_k_accuracy', experiment_name='real_data',
        primary_regimes=f'fashion_mnist:dir(0.1)@100,fashion_mnist:#C=2@100,{SHAKESPEARE_REGIME}',
        description='The real-data preset (`--preset=real_data --leaf_dir=DIR`, '
        'docs/experiments.md, "Real data"): Fashion-MNIST over 100 clients, 10 a round, under two '
        'label skews; Shakespeare by speaker, the first 100 roles (by id) of '
        '`tools/shakespeare_leaf.py`\'s LEAF JSON, each capped at 64 training windows and 150 '
        'test windows; the digits sanity regime outside the primary family; the five '
        'methods, the baselines, FedGH on each baseline (`fedgh` is FedGH on FedAvg) and the '
        'compositions of the methods\' halves with FedGH (the primary family: the five methods '
        'against each baseline; the rest untested); every method, the baselines included, '
        'searched on the same client lr x server lr product on each regime\'s own validation '
        'split (3 tuning seeds, successive halving, 2 finalists at full length, edge extension) '
        'at its authors\' values; E = 1; the primary statistic the mean test accuracy of the '
        'last 20 rounds; 10 reporting seeds, each drawing its own partition; rounds from each '
        'regime\'s pilot (docs/results/pilots/horizons.md).'),
    'diagnosis': dict(
        _TUNED, regimes='digits:dir(0.1),digits:#C=2,synthetic(1,1)',
        methods=','.join(DIAGNOSIS_METHODS), epochs=['1'], report_seeds=_SEEDS, rounds=50,
        clients_per_round=10, client_batch_size=20, tune_server_lr=True,
        variants_inherit=True, eval_train_loss=True, experiment_name='diagnosis',
        description='The diagnosis variants (`--preset=diagnosis`): each beside its parent, at '
        'the parent\'s tuned values with one thing changed, 10 reporting seeds.'),
    'fedga_setting': dict(
        _TUNED, regimes='digits:client_dir(0.1)@100,synthetic(1,1)@100',
        methods='fedavg,fedga,fedga_paper,fedavg_clip,fedga_clip,fedga_paper_clip',
        epochs=['2'], tune_epochs=['2'], report_seeds=_SEEDS, rounds=50, clients_per_round=10,
        client_batch_size=64,
        tuning_regimes='digits:digits:client_dir(0.1)@100,synthetic:synthetic(1,1)@100',
        experiment_name='fedga_setting',
        description='FedGA\'s federation on other data (`--preset=fedga_setting`): 100 clients '
        'of equal size, 10 per round, E = 2, batch 64, 50 rounds; FedGA\'s forms with and '
        'without clipping at 5.0 against FedAvg clipped alike; 10 reporting seeds.'),
    **PAPER_TABLES,
}

# The positive control (`--positive_control`): the FedProx paper's Synthetic(1, 1) experiment
# (Li et al., "Federated Optimization in Heterogeneous Networks", MLSys 2020, arXiv:1812.06127,
# Fig. 1-2), untuned, the data of seed `data_seed` for every seed; benchmark settings by their
# flat names (`benchmarking.config.replace_settings`).
POSITIVE_CONTROL = dict(regimes=('synthetic(1,1)',), baseline='fedavg',
                        methods=('fedavg', 'fedprox_mu1'), epochs=(20,), rounds=40,
                        clients_per_round=10, batch_size=10, client_learning_rate=0.01, data_seed=0)


# experiments.compare's: the README's main command (`make run`; --runtime=cpp gives the same
# table on TFF's runtime).
COMPARE = {
    'readme': dict(dataset='digits', num_clients=20, alpha=0.1, clients_per_round=10, rounds=20,
                   client_epochs=2, client_batch_size=20, model='mlp', client_learning_rate=0.1,
                   eval_every=1, algorithms=['fedavg', 'fedprox', 'fedgh', 'fedmgc', 'fedga',
                                             'fedld', 'fed_corrective'],
                   seeds=['0'], target_accuracy=0.8, experiment_name='readme_digits'),
}
