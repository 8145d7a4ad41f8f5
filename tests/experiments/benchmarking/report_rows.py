"""runs.csv rows made by hand, for the report's tests (three methods over two regimes and two E,
three seeds each), and Holm's adjustment as a plain loop to check the report against."""

from experiments.benchmarking import runs


# final accuracy per (regime, E, method, seed)
FINALS = {
    ('digits:iid', 1): {'fedavg': [0.80, 0.82, 0.84], 'fedgh': [0.82, 0.84, 0.86],
                        'fedld': [0.70, 0.80, 0.90]},
    ('digits:#C=2', 1): {'fedavg': [0.60, 0.62, 0.64], 'fedgh': [0.63, 0.64, 0.68],
                         'fedld': [0.50, 0.51, 0.55]},
    ('digits:iid', 5): {'fedavg': [0.85, 0.86, 0.87], 'fedgh': [0.85, 0.86, 0.87],
                        'fedld': [0.80, 0.81, 0.83]},
}


CONFIG = {'regimes': ['digits:iid', 'digits:#C=2'], 'methods': ['fedavg', 'fedgh', 'fedld'],
           'baseline': 'fedavg', 'epochs': [1, 5], 'report_seeds': [0, 1, 2],
           'experiment_name': 'unit',
           'tuning': {'tune': True, 'strategy': 'staged', 'last_k': 5, 'plateau_window': 10,
                      'plateau_tolerance': 0.01},
           'plan': {'models': {}, 'tuning_regimes': {},
                    'methods': [{'name': m, 'parent': None, 'grid': {}, 'server_lrs': [1.0]}
                                for m in ('fedavg', 'fedgh', 'fedld')]}}


def holm_reference(p_values):
  """Holm's adjustment as a plain loop: p_(i) (m - i + 1), then the running maximum."""
  order = sorted(range(len(p_values)), key=lambda i: p_values[i])
  out, running = [0.0] * len(p_values), 0.0
  for rank, i in enumerate(order):
    running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
    out[i] = running
  return out


def rows():
  rows = []
  for (regime, e), per_method in FINALS.items():
    for method, finals in per_method.items():
      for seed, final in enumerate(finals):
        curve = [final * r / 4 for r in range(1, 5)]
        rows.append({
            'regime': regime, 'dataset': 'digits', 'method': method,
            'algorithm': method, 'epochs': e, 'seed': seed, 'data_seed': seed, 'model': 'mlp',
            'client_lr': 0.1, 'server_lr': 1.0, 'hparams': '{}', 'final_accuracy': final,
            'last_k_accuracy': final, 'best_accuracy': final, 'diverged': False,
            'diverged_round': None, 'collapsed': False,
            'conflict_before': None if method == 'fedavg' else 0.4,
            'conflict_after': None if method == 'fedavg' else 0.1,
            'norm_ratio': 0.8 if method == 'fedld' else None, 'seconds_per_round': 0.5,
            'run_seconds': 2.0, 'accuracy_curve': runs.encode_curve(curve),
            'train_loss_curve': runs.encode_curve([1.0, 0.8, 0.6, 0.5]),
            'conflict_curve': ''})
  return rows
