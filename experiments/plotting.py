"""PNG line plots of a metric per round, one line per algorithm (matplotlib, Agg backend)."""

import os
from typing import Mapping, Sequence

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np  # pylint: disable=g-import-not-at-top

from experiments import files  # pylint: disable=g-import-not-at-top


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
