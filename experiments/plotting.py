"""PNG plots (matplotlib, Agg backend): a metric per round, one line per method; the benchmark's
plots from runs.csv's rows."""

import math
import os
from typing import Mapping, Sequence

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from experiments import files  # pylint: disable=g-import-not-at-top
from experiments import stats  # pylint: disable=g-import-not-at-top
from experiments.benchmarking import results  # pylint: disable=g-import-not-at-top
from experiments.benchmarking import runs as runs_lib  # pylint: disable=g-import-not-at-top


def plot_curves(curves: Mapping[str, Sequence[Mapping[int, float]]], path: str, *,
                ylabel: str, title: str = '') -> bool:
  """Writes a PNG with one line per label: the mean over seeds, with a shaded band of +- one
  standard deviation where there are several.

  Args:
    curves: label -> one dict `round_num -> value` per seed. Rounds missing from a seed (e.g.
      rounds without evaluation) are skipped; a label with no value at all gets no line.
    path: the PNG file to write.
    ylabel: the y-axis label.
    title: the figure title.

  Returns:
    Whether any line was drawn (no file is written otherwise).
  """
  fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
  drawn = False
  for label, per_seed in curves.items():
    rounds = sorted(set().union(*[set(s) for s in per_seed])) if per_seed else []
    xs, means, stds = [], [], []
    for r in rounds:
      values = [s[r] for s in per_seed if r in s and s[r] is not None and np.isfinite(s[r])]
      if values:
        xs.append(r)
        means.append(float(np.mean(values)))
        stds.append(float(np.std(values)))
    if not xs:
      continue
    means, stds = np.array(means), np.array(stds)
    (line,) = ax.plot(xs, means, label=label, linewidth=1.6, marker='.' if len(xs) < 30 else None)
    if len(per_seed) > 1:
      ax.fill_between(xs, means - stds, means + stds, color=line.get_color(), alpha=0.15)
    drawn = True
  if drawn:
    ax.set_xlabel('round')
    ax.set_ylabel(ylabel)
    if title:
      ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize='small')
    fig.tight_layout()
    save(fig, path)
  plt.close(fig)
  return drawn


def save(fig, path: str) -> None:
  """Writes `fig` to `path` atomically (`experiments.files`: the umask's permissions, a refused
  write names the file); the format is the file's extension."""
  with files.atomic_open(path, 'wb') as f:
    fig.savefig(f, format=os.path.splitext(path)[1][1:] or 'png')


def _curves(per_method, key):
  out = {}
  for method, per_seed in per_method.items():
    out[method] = [{i: v for i, v in enumerate(runs_lib.decode_curve(row.get(key)), start=1)
                    if v is not None} for row in per_seed.values()]
  return out


def write_plots(rows, config, plots_dir: str) -> dict[str, str]:
  """Writes the plots; returns name -> file name (inside `plots_dir`)."""
  os.makedirs(plots_dir, exist_ok=True)
  baseline = config.get('baseline', 'fedavg')
  statistic = results.primary_statistic(config)
  regimes, methods, epochs = results.orders(rows, config)
  cells = results.group(rows)
  written = {}
  for regime in regimes:
    for e in epochs:
      cell = cells.get((regime, e))
      if not cell:
        continue
      ordered = {m: cell[m] for m in methods if m in cell}
      stem = f'{runs_lib.slug(regime.replace("#C=", "C"))}_E{e}'
      global_loss = any(row.get('global_train_loss_curve') for per_seed in ordered.values()
                        for row in per_seed.values())
      # One loss comparable across methods: the global model's cross-entropy on the training
      # data. Without it, the clients' mean training loss is each method's own objective
      # (focal, calibrated, margin ...): labelled so, not comparable across methods.
      loss_curve, loss_label = (
          ('global_train_loss_curve', 'global model\'s cross-entropy on the training data')
          if global_loss else
          ('train_loss_curve', 'each method\'s own training objective\n(not comparable '
           'across methods)'))
      for key, what, ylabel in (('accuracy_curve', 'accuracy', 'test accuracy'),
                                (loss_curve, 'train_loss', loss_label)):
        name = f'{what}_{stem}.png'
        if plot_curves(_curves(ordered, key), os.path.join(plots_dir, name),
                                ylabel=ylabel, title=f'{regime}, E={e} (mean ± std over seeds)'):
          written[f'{what}:{regime}:{e}'] = name
  # Gain against conflict.
  markers = ['o', 's', '^', 'D', 'v', 'P']
  fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=110)
  drawn = False
  all_means = []
  for i, method in enumerate(m for m in methods if m != baseline):
    for j, e in enumerate(epochs):
      xs, ys, lows, highs = [], [], [], []
      for regime in regimes:
        cell = cells.get((regime, e))
        if not cell:
          continue
        conflict, _ = results.regime_conflict(cell, baseline)
        d = results.difference(cell, method, baseline, statistic)
        if conflict is None or d is None:
          continue
        xs.append(conflict)
        ys.append(d.mean)
        all_means.append(d.mean)
        lows.append(d.mean - d.low if d.n >= 2 else 0.0)
        highs.append(d.high - d.mean if d.n >= 2 else 0.0)
      if xs:
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt=markers[j % len(markers)],
                    color=f'C{i % 10}', capsize=2, alpha=0.85,
                    label=f'{method} E={e}')
        drawn = True
  if drawn:
    # The means decide the range; intervals wider than it (few seeds) run off the axes.
    low, high = min(all_means + [0.0]), max(all_means + [0.0])
    pad = max(0.01, 0.5 * (high - low))
    ax.set_ylim(low - pad, high + pad)
    ax.axhline(0.0, color='black', linewidth=0.8)
    ax.set_xlabel(f'measured conflict fraction of the regime ({baseline} or mean of methods)')
    ax.set_ylabel(f'{results.statistic_label(statistic, config)} − {baseline} (95% CI)')
    ax.set_title('Gain over the baseline against gradient conflict')
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize='x-small', ncol=2)
    fig.tight_layout()
    save(fig, os.path.join(plots_dir, 'gain_vs_conflict.png'))
    written['gain_vs_conflict'] = 'gain_vs_conflict.png'
  plt.close(fig)
  # Effect of E.
  others = [m for m in methods if m != baseline]
  if others and len(epochs) > 1:
    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=110)
    width = 0.8 / len(epochs)
    for j, e in enumerate(epochs):
      means, spreads = [], []
      for method in others:
        ds = [results.difference(cells[(r, e)], method, baseline, statistic) for r in regimes
              if (r, e) in cells]
        values = [d.mean for d in ds if d is not None]
        mean, std = stats.mean_std(values)
        means.append(0.0 if math.isnan(mean) else mean)
        spreads.append(0.0 if math.isnan(std) else std)
      ax.bar([k + j * width for k in range(len(others))], means, width, yerr=spreads,
             capsize=2, label=f'E={e}')
    ax.axhline(0.0, color='black', linewidth=0.8)
    ax.set_xticks([k + width * (len(epochs) - 1) / 2 for k in range(len(others))])
    ax.set_xticklabels(others, rotation=20, fontsize='small')
    ax.set_ylabel(f'{results.statistic_label(statistic, config)} − {baseline}\nmean over regimes '
                  '(± std over regimes)')
    ax.set_title('Effect of local epochs on each method\'s gain')
    ax.grid(True, axis='y', alpha=0.3)
    ax.legend(fontsize='small')
    fig.tight_layout()
    save(fig, os.path.join(plots_dir, 'epochs_effect.png'))
    plt.close(fig)
    written['epochs_effect'] = 'epochs_effect.png'
  return written


def write_validation_plots(curve_rows, config, plots_dir: str) -> dict[tuple[str, int], str]:
  """One plot per tuning regime and E of each method's chosen candidate's validation accuracy
  (mean ± std over the tuning seeds); returns (regime, E) -> file name inside `plots_dir`."""
  written = {}
  for (regime, epochs), per_method in results.curve_groups(curve_rows).items():
    os.makedirs(plots_dir, exist_ok=True)
    curves = {m: [{i: v for i, v in enumerate(c, start=1) if v is not None} for c in seeds]
              for m, seeds in per_method.items()}
    name = f'validation_{runs_lib.slug(regime.replace("#C=", "C"))}_E{epochs}.png'
    if plot_curves(curves, os.path.join(plots_dir, name),
                            ylabel='validation accuracy',
                            title=f'tuning, {regime}, E={epochs} '
                                  '(mean ± std over tuning seeds)'):
      written[(regime, epochs)] = name
  return written
