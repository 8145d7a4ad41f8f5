"""The report's PNG plots (matplotlib, Agg backend): a metric per round, one line per method
(`plot_curves`, also compare's); the benchmark's plots from runs.csv's rows."""

import itertools
import math
import os
from typing import Any, Mapping, Sequence

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from tff_conflict import _files as files  # pylint: disable=g-import-not-at-top
from experiments import stats  # pylint: disable=g-import-not-at-top
from experiments.benchmarking import results  # pylint: disable=g-import-not-at-top
from experiments.benchmarking import runs as runs_lib  # pylint: disable=g-import-not-at-top


# Matplotlib's ten colours, then ten darker or other hues.
_COLOURS = ('#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
            '#7f7f7f', '#bcbd22', '#17becf', '#000000', '#393b79', '#637939', '#8c6d31',
            '#843c39', '#7b4173', '#e7ba52', '#6b6ecf', '#31a354', '#fd8d3c')


def style(index: int) -> dict[str, str]:
  """The `index`-th method's matplotlib `color`, `linestyle` (one per ten) and `marker` (a
  cycle of 7, coprime with 10): distinct colours below 20."""
  return {'color': _COLOURS[index % 20], 'linestyle': ('-', '--', ':', '-.')[index // 10 % 4],
          'marker': ('o', 's', '^', 'D', 'v', 'P', 'X')[index % 7]}


def plot_curves(curves: Mapping[str, Sequence[Any]], path: str, *, ylabel: str,
                title: str = '', order: Sequence[str] = ()) -> bool:
  """Writes a PNG of a line per label (`curves`: label -> per seed round -> value, or values of
  rounds 1, 2, ...; None or non-finite skipped): the mean over seeds +- one sd, styled by its
  place in `order` (others after); returns whether a line was drawn (no file otherwise)."""
  fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
  drawn = False
  order = list(order) + [label for label in curves if label not in order]
  for label, per_seed in curves.items():
    per_seed = [s if isinstance(s, Mapping) else dict(enumerate(s, start=1)) for s in per_seed]
    values = {r: [s[r] for s in per_seed if r in s and s[r] is not None and np.isfinite(s[r])]
              for r in sorted(set().union(*per_seed))}
    xs = [r for r, v in values.items() if v]
    if xs:
      means, stds = (np.array([float(f(values[r])) for r in xs]) for f in (np.mean, np.std))
      (line,) = ax.plot(xs, means, label=label, linewidth=1.6, markersize=4,
                        markevery=max(1, len(xs) // 12), **style(order.index(label)))
      if len(per_seed) > 1:
        ax.fill_between(xs, means - stds, means + stds, color=line.get_color(), alpha=0.15)
      drawn = True
  if drawn:
    ax.set_xlabel('round')
    if title:
      ax.set_title(title)
    _save(fig, ax, path, ylabel)
  plt.close(fig)
  return drawn


def _save(fig, ax, path: str, ylabel: str, legend: str = 'small', grid: str = 'both',
          **legend_kwargs) -> None:
  """Labels `ax`, then writes `fig` atomically in `path`'s format."""
  ax.set_ylabel(ylabel)
  ax.grid(True, alpha=0.3, axis=grid)
  ax.legend(fontsize=legend, **legend_kwargs)
  fig.tight_layout()
  with files.atomic_open(path, 'wb') as f:
    fig.savefig(f, format=os.path.splitext(path)[1][1:] or 'png')


def _stem(regime: str, epochs: int) -> str:
  return f'{runs_lib.slug(regime.replace("#C=", "C"))}_E{epochs}'


def _diverged_label(method: str, per_seed) -> str:
  """`method`, with how many of its runs diverged (drawn at chance from then on)."""
  diverged = sum(results.is_true(row.get('diverged')) for row in per_seed.values())
  return f'{method} ({diverged}/{len(per_seed)} diverged, at chance after)' if diverged else method


def _curve_plots(rows, config, methods, plots_dir: str) -> dict[str, str]:
  """Per regime and E, the test accuracy and the training loss per round, a line per method."""
  written = {}
  for regime, e, cell in results.cells(rows, config):
    ordered = {m: cell[m].values() for m in methods if m in cell}
    # The global model's cross-entropy on the training data compares methods; without it, the
    # clients' training loss is each method's own objective (focal, margin ...): labelled so.
    loss_curve, loss_label = (
        ('global_train_loss_curve', 'global model\'s cross-entropy on the training data')
        if any(row.get('global_train_loss_curve') for runs in ordered.values() for row in runs)
        else ('train_loss_curve', 'each method\'s own training objective\n(not comparable '
              'across methods)'))
    for key, what, ylabel in (('accuracy_curve', 'accuracy', 'test accuracy'),
                              (loss_curve, 'train_loss', loss_label)):
      name = f'{what}_{_stem(regime, e)}.png'
      counted = key == 'accuracy_curve'   # a diverged run at chance from then on, as counted
      labels = {m: _diverged_label(m, cell[m]) if counted and m in cell else m
                for m in methods}
      curves = {labels[m]: [runs_lib.counted_curve(row) if counted
                            else runs_lib.decode_curve(row.get(key)) for row in runs]
                for m, runs in ordered.items()}
      if plot_curves(curves, os.path.join(plots_dir, name), ylabel=ylabel,
                     title=f'{regime}, E={e} (mean ± std over seeds)',
                     order=[labels[m] for m in methods]):
        written[f'{what}:{regime}:{e}'] = name
  return written


def _gain_plot(rows, baseline: str, orders, found, path: str, ylabel: str) -> bool:
  """Each method's gain (95% CI) against its regime's conflict, per E; whether drawn."""
  (regimes, methods, epochs), cells = orders, results.group(rows)
  markers = ['o', 's', '^', 'D', 'v', 'P']
  fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
  all_means = []
  for method, (j, e) in itertools.product(methods, enumerate(epochs)):   # found: no baseline
    points = [(c, found[(r, e, method)]) for r in regimes if (r, e, method) in found
              for c in [results.regime_conflict(cells[(r, e)], baseline)[0]] if c is not None]
    if points:
      ds = [d for _, d in points]
      all_means += [d.mean for d in ds]
      ax.errorbar([c for c, _ in points], [d.mean for d in ds],
                  yerr=[[d.mean - d.low if d.n >= 2 else 0.0 for d in ds],
                        [d.high - d.mean if d.n >= 2 else 0.0 for d in ds]],
                  fmt=markers[j % len(markers)], color=style(methods.index(method))['color'],
                  capsize=2, alpha=0.85, label=f'{method} E={e}')
  if all_means:
    # The means decide the range; intervals wider than it (few seeds) run off the axes.
    low, high = min(all_means + [0.0]), max(all_means + [0.0])
    pad = max(0.01, 0.5 * (high - low))
    ax.set_ylim(low - pad, high + pad)
    ax.axhline(0.0, color='black', linewidth=0.8)
    ax.set_xlabel(f'measured conflict fraction of the regime ({baseline} or mean of methods)')
    ax.set_title('Gain over the baseline against gradient conflict')
    _save(fig, ax, path, f'{ylabel} (95% CI)', 'x-small', ncol=2)
  plt.close(fig)
  return bool(all_means)


def _epochs_plot(regimes, others, epochs, found, path: str, ylabel: str) -> None:
  """Per method, its gain's mean (± std) over the regimes, a bar per E."""
  fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
  width = 0.8 / len(epochs)
  for j, e in enumerate(epochs):
    spread = [stats.mean_std([found[(r, e, m)].mean for r in regimes if (r, e, m) in found])
              for m in others]
    ax.bar([k + j * width for k in range(len(others))],
           [0.0 if math.isnan(mean) else mean for mean, _ in spread], width,
           yerr=[0.0 if math.isnan(std) else std for _, std in spread], capsize=2,
           label=f'E={e}')
  ax.axhline(0.0, color='black', linewidth=0.8)
  ax.set_xticks([k + width * (len(epochs) - 1) / 2 for k in range(len(others))])
  ax.set_xticklabels(others, rotation=20, fontsize='small')
  ax.set_title('Effect of local epochs on each method\'s gain')
  _save(fig, ax, path, f'{ylabel}\nmean over regimes (± std over regimes)', grid='y')
  plt.close(fig)


def write_plots(rows, config, plots_dir: str) -> dict[str, str]:
  """Writes the curves, the gain against conflict and the effect of E; returns name -> file."""
  os.makedirs(plots_dir, exist_ok=True)
  baseline = config['baseline']
  gain = f'{results.statistic_label(results.primary_statistic(config), config)} − {baseline}'
  regimes, methods, epochs = orders = results.orders(rows, config)
  others, found = [m for m in methods if m != baseline], results.comparisons(rows, config)
  written = _curve_plots(rows, config, methods, plots_dir)
  if _gain_plot(rows, baseline, orders, found, os.path.join(plots_dir, 'gain_vs_conflict.png'),
                gain):
    written['gain_vs_conflict'] = 'gain_vs_conflict.png'
  if others and len(epochs) > 1:
    _epochs_plot(regimes, others, epochs, found, os.path.join(plots_dir, 'epochs_effect.png'),
                 gain)
    written['epochs_effect'] = 'epochs_effect.png'
  return written


def write_validation_plots(curve_rows, plots_dir: str) -> dict[tuple[str, int], str]:
  """Writes the validation accuracy per tuning regime and E; returns (regime, E) -> file."""
  written = {}
  for (regime, epochs), curves in results.curve_groups(curve_rows).items():
    os.makedirs(plots_dir, exist_ok=True)
    name = f'validation_{_stem(regime, epochs)}.png'
    if plot_curves(curves, os.path.join(plots_dir, name), ylabel='validation accuracy',
                   title=f'tuning, {regime}, E={epochs} (mean ± std over tuning seeds)'):
      written[(regime, epochs)] = name
  return written
