"""perf.tuning_schedules: agreement of two searches' choices on hand-made tuning choices."""

import pytest

from perf import tuning_schedules


def _choice(method, scores, dataset='digits'):
  return {'dataset': dataset, 'epochs': 1, 'method': method,
          'score': max(scores.values()),
          'scores': [{'candidate': c, 'score': s, 'seeds': 1} for c, s in scores.items()]}


def test_same_choice_agrees_and_a_close_other_choice_agrees_within_one_se():
  full = {('digits', 1, m): c for m, c in (
      ('fedavg', _choice('fedavg', {'clr=0.1': 0.90, 'clr=0.3': 0.95})),
      ('fedgh', _choice('fedgh', {'clr=0.1': 0.94, 'clr=0.3': 0.95})),
      ('fedld', _choice('fedld', {'clr=0.1': 0.80, 'clr=0.3': 0.95})))}
  halving = {('digits', 1, m): c for m, c in (
      ('fedavg', _choice('fedavg', {'clr=0.1': 0.50, 'clr=0.3': 0.96})),
      ('fedgh', _choice('fedgh', {'clr=0.1': 0.96, 'clr=0.3': float('nan')})),
      ('fedld', _choice('fedld', {'clr=0.1': 0.97, 'clr=0.3': float('nan')})))}
  rows = {r['method']: r for r in tuning_schedules.agreement(full, halving, {'digits': 100})}
  se = (0.95 * 0.05 / 100) ** 0.5
  assert rows['fedavg']['same'] and rows['fedavg']['agrees']
  assert rows['fedgh']['se'] == pytest.approx(se)
  # 0.95 - 0.94 = 0.01 < SE 0.0218: a different candidate, within one standard error.
  assert not rows['fedgh']['same'] and rows['fedgh']['agrees']
  assert rows['fedgh']['halving_score'] == 0.94   # scored by the full search, not by halving
  # 0.95 - 0.80 = 0.15 > SE: disagrees.
  assert not rows['fedld']['agrees']
  assert '2 of 3 choices agree (1 the same candidate).' in tuning_schedules.markdown(
      list(rows.values()))
