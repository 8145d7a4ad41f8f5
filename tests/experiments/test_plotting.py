"""experiments.benchmarking.plots: a distinct style per method (20 methods), the same in every
plot of a benchmark; a diverged run drawn at chance from the round it diverged, as the tables
count it."""

import copy
import math

import pytest

from experiments.benchmarking import plots as plotting
from experiments.benchmarking import results
from experiments.benchmarking import runs as runs_lib
from tests.experiments.benchmarking import report_rows


def _drawn(monkeypatch):
  """path -> [(label, x, y, (colour, line style, marker))] of each plot written from now on."""
  drawn = {}
  save = plotting._save

  def recording_save(fig, ax, path, *args, **kwargs):
    drawn[path] = [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()),
                    (line.get_color(), line.get_linestyle(), line.get_marker()))
                   for line in ax.get_lines() if not line.get_label().startswith('_')]
    save(fig, ax, path, *args, **kwargs)

  monkeypatch.setattr(plotting, '_save', recording_save)
  return drawn


def test_twenty_methods_are_drawn_in_twenty_distinct_styles(tmp_path, monkeypatch):
  drawn = _drawn(monkeypatch)
  curves = {f'method{k}': [[0.1 * k, 0.1 * k + 0.05]] for k in range(20)}
  path = str(tmp_path / 'accuracy.png')
  assert plotting.plot_curves(curves, path, ylabel='test accuracy')
  styles = [style for _, _, _, style in drawn[path]]
  assert len(styles) == 20 and len(set(styles)) == 20, styles
  assert len({colour for colour, _, _ in styles}) == 20   # no two methods share a colour
  # Deterministic per the method order: the k-th label gets style(k).
  assert [label for label, _, _, _ in drawn[path]] == list(curves)
  assert styles[11] == tuple(plotting.style(11)[k] for k in ('color', 'linestyle', 'marker'))


def test_a_method_keeps_its_style_when_another_is_missing(tmp_path, monkeypatch):
  drawn = _drawn(monkeypatch)
  order = ['fedavg', 'fedgh', 'fedld']
  curves = {'fedavg': [[0.5, 0.6]], 'fedld': [[0.4, 0.5]]}
  path = str(tmp_path / 'accuracy.png')
  plotting.plot_curves(curves, path, ylabel='test accuracy', order=order)
  assert drawn[path][1][3][0] == plotting.style(2)['color']


def _diverge(row, at_round, chance=0.1):
  """`row` as runs.csv records a run whose accuracy is NaN from `at_round` on."""
  curve = runs_lib.decode_curve(row['accuracy_curve'])
  curve = curve[:at_round - 1] + [math.nan] * (len(curve) - at_round + 1)
  return dict(row, accuracy_curve=runs_lib.encode_curve(curve), diverged=True,
              diverged_round=at_round, chance_accuracy=chance, final_accuracy=chance)


def test_a_diverged_run_is_drawn_at_chance_from_the_round_it_diverged(tmp_path, monkeypatch):
  drawn = _drawn(monkeypatch)
  rows = copy.deepcopy(report_rows.rows())
  cell = lambda r: r['regime'] == 'digits:#C=2' and r['epochs'] == 1
  # Every seed of fedld diverges in round 1 (nothing finite left to draw), one of fedgh's in
  # round 3.
  rows = [_diverge(r, 1) if cell(r) and r['method'] == 'fedld'
          else _diverge(r, 3) if cell(r) and r['method'] == 'fedgh' and r['seed'] == 0 else r
          for r in rows]
  results.write_csv(str(tmp_path / 'runs.csv'), rows)   # as the report reads them
  rows = results.read_runs(str(tmp_path / 'runs.csv'))
  written = plotting.write_plots(rows, report_rows.CONFIG, str(tmp_path))
  lines = {label: (x, y) for label, x, y, _ in
           drawn[str(tmp_path / written['accuracy:digits:#C=2:1'])]}
  x, y = lines['fedld (3/3 diverged, at chance after)']
  assert x == [1, 2, 3, 4] and y == pytest.approx([0.1] * 4)
  x, y = lines['fedgh (1/3 diverged, at chance after)']
  finals = report_rows.FINALS[('digits:#C=2', 1)]['fedgh']
  assert x == [1, 2, 3, 4]
  assert y[3] == pytest.approx((0.1 + finals[1] + finals[2]) / 3)   # the mean over seeds, counted
  # The training loss plot keeps the methods' plain names and their styles.
  losses = drawn[str(tmp_path / written['train_loss:digits:#C=2:1'])]
  assert [label for label, _, _, _ in losses] == ['fedavg', 'fedgh', 'fedld']
  accuracy_styles = [s for _, _, _, s in drawn[str(tmp_path / written['accuracy:digits:#C=2:1'])]]
  assert [s for _, _, _, s in losses] == accuracy_styles
