"""The report's diagnosis from runs tables made by hand: paired gaps, the variants' table and the
readings, the positive control."""

import math

import numpy as np
import pytest

from experiments import stats
from experiments.benchmarking import diagnosis
from experiments.benchmarking import results


def test_gap_text_is_the_shared_t_interval():
  d = [0.1, 0.2, 0.15]
  got = stats.paired_difference(dict(enumerate(d)), dict.fromkeys(range(3), 0.0))
  sem = np.std(d, ddof=1) / math.sqrt(3)
  assert (got.high - got.low) / 2 == pytest.approx(4.302652729749464 * sem)  # t(0.975, 2)
  # No significance mark: a diagnosis is exploratory (the Results tables mark what Holm keeps).
  assert diagnosis.fmt_gap(got) == f'+0.150 ± {4.302652729749464 * sem:.3f}'
  assert diagnosis.fmt_gap(stats.paired_difference({0: -0.05}, {0: 0.0})) == '-0.050 (n=1)'
  assert diagnosis.fmt_gap(None) == '-'


def _table():
  """Two regimes, 3 seeds; fedga loses on rare pairs in r1; fedga_paper narrows the gap."""
  runs = []
  for s in range(3):
    for regime in ('r1', 'r2'):
      base = 0.9 + 0.01 * s
      runs.append(dict(regime=regime, method='fedavg', seed=s, final_accuracy=base,
                       accuracy_drop=0.01, final_rare_pair_error=0.01,
                       final_common_pair_error=0.01, final_mean_logit=0.1))
      runs.append(dict(regime=regime, method='fedga', seed=s, final_accuracy=base - 0.1 - 0.01 * s,
                       accuracy_drop=0.1, final_rare_pair_error=0.05 + 0.01 * s,
                       final_common_pair_error=0.012, final_mean_logit=3.1))
      runs.append(dict(regime=regime, method='fedga_paper', seed=s,
                       final_accuracy=base + (0.002 if s == 1 else -0.002),
                       accuracy_drop=0.02))
  runs.append(dict(regime='r1', method='fedld', seed=0, final_accuracy=0.8,
                   norm_ratio=0.5, conflict_before=0.4))
  return [dict(r, epochs=1) for r in runs]


def test_gap_is_paired_over_shared_seeds():
  runs = _table() + [dict(regime='r1', epochs=1, method='fedga', seed=9, final_accuracy=0.0)]
  cells = results.group(runs)
  g = diagnosis.gap(cells[('r1', 1)], 'fedga', 'fedavg', 'final_accuracy')
  assert g.n == 3 and g.mean == pytest.approx(-0.11)
  assert diagnosis.gap(cells[('r1', 1)], 'fedmgc', 'fedavg', 'final_accuracy') is None
  assert [label for label, _ in diagnosis.cells_of(runs, 'fedld')] == ['r1, E=1']


def test_fedga_section():
  text = diagnosis.section('fedga', 'fedga', _table())
  assert text.startswith('Two properties of the paper')   # its reading, from docs/experiments.md
  assert '| r1, E=1 | 0.910 ± 0.010 | 0.800 ± 0.000 | -0.110 ± 0.025 |' in text
  # The per-pair excess is on rare pairs (+0.05) far above common pairs (+0.002).
  assert 'r1, E=1: the extra errors concentrate on rarely co-located pairs (+0.050' in text
  assert '| fedga_paper | form=paper |' in text
  assert 'narrows the gap by 0.109' in text
  assert 'closes the gap' not in text and 'beats' not in text
  assert '| r1, E=1 | 3.10 ± 0.00 | 0.10 ± 0.00 | +3.000 ± 0.000 |' in text
  assert 'fedga_clip' not in text.split('Variants')[1].split('\n| fedga_paper')[0]


def test_fedld_section_shows_norm_ratio_and_compensating_lr():
  text = diagnosis.section('fedld', 'fedld', _table())
  assert '| r1, E=1 | 0.500 | 2.00 | 0.400 |' in text
  assert 'No variant of fedld was run' in text
  with pytest.raises(ValueError, match="'fedmgc' has no run"):
    diagnosis.section('fedmgc', 'fedmgc', _table())


def test_clipped_variants_are_compared_with_the_clipped_baseline():
  runs = _table()
  for s in range(3):
    for regime in ('r1', 'r2'):
      runs.append(dict(regime=regime, epochs=1, method='fedavg_clip', seed=s,
                       final_accuracy=0.7))
      runs.append(dict(regime=regime, epochs=1, method='fedga_clip', seed=s,
                       final_accuracy=0.75 + 0.01 * s))
  # fedga_clip - fedavg_clip = +0.06 (against fedavg it would be -0.14).
  text = diagnosis.section('fedga', 'fedga', runs)
  row = next(line for line in text.splitlines() if line.startswith('| fedga_clip |'))
  assert '| fedavg_clip | +0.060 ± ' in row
  assert '| fedga_paper | form=paper |' in text and '| fedavg | ' in text
  section = diagnosis.section('fedga_clip', 'fedga', runs)
  assert '| r1, E=1 | 0.700 ± 0.000 | 0.760 ± 0.010 | +0.060 ± ' in section
  assert '| regime | fedavg_clip final accuracy | fedga_clip final accuracy |' in section
  # Without the clipped baseline's runs, the report's baseline is used.
  alone = [r for r in runs if r['method'] != 'fedavg_clip']
  assert diagnosis.variant_baseline('fedga_clip', alone) == 'fedavg'
  assert '| r1, E=1 | 0.910 ± 0.010 | 0.760 ± 0.010 | -0.150 ± ' in diagnosis.section(
      'fedga_clip', 'fedga', alone)


def test_a_retired_variant_name_still_renders():
  # Runs tables written before a variant was renamed (e.g. 'fedga_soft', now FedGA's default)
  # report it as a method of its algorithm, against the baseline.
  runs = [dict(r, method='fedga_soft') if r['method'] == 'fedga_paper' else r for r in _table()]
  text = diagnosis.section('fedga_soft', 'fedga', runs)
  assert '| r1, E=1 | 0.910 ± 0.010 | 0.909 ± 0.010 | -0.001 ± 0.006 |' in text
  assert 'No variant of fedga_soft was run' in text


def test_sections_with_local_epochs_and_a_variant_method():
  runs = [dict(r, epochs=2) for r in _table()] + [
      dict(regime='r1', epochs=5, method=m, seed=s, final_accuracy=a)
      for s in range(2) for m, a in (('fedavg', 0.9), ('fedga', 0.6))]
  text = diagnosis.section('fedga', 'fedga', runs)
  assert '| r1, E=2 |' in text and '| r1, E=5 | 0.900 ± 0.000 | 0.600 ± 0.000 | -0.300 ' in text
  soft = diagnosis.section('fedga_paper', 'fedga', runs)
  assert soft.startswith('A variant of fedga: ') and 'Variants (' not in soft


def test_positive_control_section():
  runs = []
  for s in range(3):
    runs.append(dict(regime='syn', epochs=20, method='fedavg', seed=s,
                     tail_global_train_loss=1.4 + 0.01 * s,
                     global_train_loss_rise=0.6 + 0.02 * s, final_accuracy=0.5))
    runs.append(dict(regime='syn', epochs=20, method='fedprox_mu1', seed=s,
                     tail_global_train_loss=1.0 + 0.02 * s, global_train_loss_rise=0.1,
                     final_accuracy=0.6 + 0.01 * s))
  text = diagnosis.control_section(runs, method='fedprox_mu1', baseline='fedavg')
  # Sample standard deviations (ddof = 1, experiments.stats): 0.010 and 0.020.
  assert ('| training loss (global model), mean of the last quarter of rounds | 1.410 ± 0.010 '
          '| 1.020 ± 0.020 | -0.390 ') in text
  assert 'reproduced: lower and steadier training loss' in text
  flat = [dict(r, global_train_loss_rise=0.6) for r in runs]
  flat[1]['global_train_loss_rise'] = 0.7   # one seed of the treated method rises more
  assert 'not reproduced' in diagnosis.control_section(flat, method='fedprox_mu1',
                                                       baseline='fedavg')
  # Significantly but only marginally smoother: not the published effect.
  marginal = [dict(r, global_train_loss_rise=0.55 + 0.001 * r['seed'])
              if r['method'] == 'fedprox_mu1' else r for r in runs]
  assert 'not reproduced' in diagnosis.control_section(marginal, method='fedprox_mu1',
                                                       baseline='fedavg')
  without = [r for r in runs if r['method'] == 'fedprox_mu1']
  with pytest.raises(ValueError, match='--eval_train_loss'):
    diagnosis.control_section(without, method='fedprox_mu1', baseline='fedavg')
  with pytest.raises(ValueError, match='no run of'):
    diagnosis.control_section(runs, method='fedprox', baseline='fedavg')


def _gap(mean, half_width, n=3):
  return stats.Interval(mean, mean - half_width, mean + half_width, n)


def test_verdicts():
  lose = _gap(-0.1, 0.02)
  # No verdict word against FedAvg: the Results tables' Holm-adjusted comparisons give those.
  assert diagnosis._verdict(lose, _gap(0.001, 0.01)) == 'narrows the gap by 0.101'
  assert diagnosis._verdict(lose, _gap(0.05, 0.01)) == 'narrows the gap by 0.150'
  # An interval that includes 0 only because it is wide is not a closed gap.
  assert diagnosis._verdict(lose, _gap(-0.3, 0.5)) == 'widens the gap by 0.200'
  assert diagnosis._verdict(lose, _gap(-0.05, 0.01)) == 'narrows the gap by 0.050'
  assert diagnosis._verdict(lose, None) == 'not run'


def test_no_section_for_the_baseline():
  assert diagnosis.section('fedavg', 'fedavg', _table()) is None
