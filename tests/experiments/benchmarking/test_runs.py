"""A run's summary from its metrics rows, curves as text, result files and directories."""

import math
import os

import numpy as np
import pytest

from experiments.benchmarking import runs


def _rows():
  rows = []
  accuracies = [0.2, None, 0.6, 0.5, 0.55]
  for r, a in enumerate(accuracies, start=1):
    rows.append({'round_num': r, 'train_loss': 2.0 / r, 'test_accuracy': a,
                 'test_loss': None if a is None else 1.0 - a,
                 'test_macro_f1': None if a is None else a / 2, 'round_time_s': 10.0 if r == 1
                 else 1.0 + r, 'aggregator/conflict_fraction_before': 0.5,
                 'aggregator/conflict_fraction_after': 0.1 * r, 'aggregator/norm_ratio': 0.8})
  return rows


def test_summary_of_hand_made_rows():
  s = runs.summarize(_rows(), prefix='test', last_k=2)
  assert s['final_accuracy'] == 0.55 and s['best_accuracy'] == 0.6 and s['best_round'] == 3
  assert s['last_k_accuracy'] == pytest.approx(0.525)
  assert s['final_loss'] == pytest.approx(0.45) and s['final_macro_f1'] == pytest.approx(0.275)
  assert s['final_train_loss'] == pytest.approx(0.4) and s['diverged'] is False
  assert s['conflict_before'] == 0.5 and s['conflict_after'] == pytest.approx(0.3)
  assert s['norm_ratio'] == 0.8
  assert s['seconds_per_round'] == pytest.approx((3 + 4 + 5 + 6) / 4) and s['first_round_s'] == 10
  assert runs.decode_curve(s['accuracy_curve']) == [0.2, None, 0.6, 0.5, 0.55]
  assert runs.decode_curve(s['conflict_curve']) == [0.5] * 5
  assert s['final_global_train_loss'] is None and s['global_train_loss_curve'] == ''
  with_global = [dict(r, global_train_loss=1.0 / r['round_num']) for r in _rows()]
  s = runs.summarize(with_global, prefix='test')
  assert s['final_global_train_loss'] == 0.2
  assert runs.decode_curve(s['global_train_loss_curve']) == [1.0, 0.5, 0.333333, 0.25, 0.2]


def test_summary_without_aggregator_diagnostics_and_with_divergence():
  rows = [{'round_num': 1, 'train_loss': float('nan'), 'val_accuracy': 0.1,
           'round_time_s': 1.0}]
  s = runs.summarize(rows, prefix='val', last_k=5)
  assert s['diverged'] is True and s['conflict_before'] is None and s['norm_ratio'] is None
  assert s['last_k_accuracy'] == 0.1 and s['conflict_curve'] == ''
  rows[0]['val_accuracy'] = float('nan')
  assert math.isnan(runs.summarize(rows, prefix='val')['last_k_accuracy'])


def _diverging(accuracies, **columns):
  rows = []
  for r, a in enumerate(accuracies, start=1):
    row = {'round_num': r, 'train_loss': 1.0, 'test_accuracy': a, 'test_loss': 1.0}
    row.update({k: v[r - 1] for k, v in columns.items()})
    rows.append(row)
  return rows


def test_a_non_finite_accuracy_or_loss_diverges_the_run_and_counts_as_chance_from_then_on():
  rows = _diverging([0.5, 0.6, float('nan'), float('nan')])
  s = runs.summarize(rows, prefix='test', last_k=3, num_classes=10)
  assert s['diverged'] is True and s['diverged_round'] == 3
  # Its last-3 mean, 0.267, is above twice chance; the run collapsed because it diverged.
  assert s['collapsed'] is False and runs.collapse_columns(s, None)['collapsed'] is True
  assert s['final_accuracy'] == 0.1 and s['chance_accuracy'] == 0.1
  assert s['last_k_accuracy'] == pytest.approx((0.6 + 0.1 + 0.1) / 3)
  assert runs.decode_curve(s['accuracy_curve'])[2] is not None  # the raw curve: nan
  assert math.isnan(runs.decode_curve(s['accuracy_curve'])[2])
  # A non-finite evaluated loss (a non-finite weight) diverges a run with a finite accuracy.
  rows = _diverging([0.5, 0.6, 0.3], test_loss=[1.0, float('inf'), 2.0])
  s = runs.summarize(rows, prefix='test', last_k=2, num_classes=10)
  assert s['diverged_round'] == 2 and s['last_k_accuracy'] == pytest.approx(0.1)


def test_clients_zeroed_for_non_finite_updates_diverge_the_run():
  # Every update zeroed: the clients report loss 0 and no example; the model stops training.
  rows = _diverging([0.5, 0.6, 0.6], train_loss=[1.0, 0.0, 0.0],
                    **{'client_work/train/num_examples': [80, 0, 0]})
  s = runs.summarize(rows, prefix='test', last_k=2, num_classes=10)
  assert s['diverged'] is True and s['diverged_round'] == 2 and s['zeroed_rounds'] == 2
  assert s['final_accuracy'] == 0.1
  rejected = _diverging([0.5, 0.5], **{'finalizer/update_non_finite': [0.0, 1.0]})
  assert runs.summarize(rejected, prefix='test')['diverged_round'] == 2
  healthy = runs.summarize(_diverging([0.5, 0.6], **{'client_work/train/num_examples': [8, 9]}),
                           prefix='test', num_classes=10)
  assert healthy['diverged'] is False and healthy['zeroed_rounds'] == 0
  assert healthy['collapsed'] is False


def test_a_run_at_chance_is_collapsed():
  s = runs.summarize(_diverging([0.2, 0.1003]), prefix='test', num_classes=10)
  assert s['diverged'] is False and s['collapsed'] is True
  assert runs.predicts_one_class([[5, 0], [5, 0]]) and not runs.predicts_one_class([[5, 0], [0, 5]])
  assert not runs.predicts_one_class([[float('nan')]]) and not runs.predicts_one_class(None)


def test_a_run_is_collapsed_below_twice_chance_over_its_last_k_rounds():
  # Ten classes: chance 0.1, the rule's bound 0.2 on the mean of the last 3 evaluated rounds.
  below = runs.summarize(_diverging([0.9, 0.15, 0.2, 0.21]), prefix='test', last_k=3,
                         num_classes=10)
  assert below['last_k_accuracy'] < 0.2 and below['collapsed'] is True
  above = runs.summarize(_diverging([0.1, 0.19, 0.2, 0.22]), prefix='test', last_k=3,
                         num_classes=10)
  assert above['last_k_accuracy'] > 0.2 and above['collapsed'] is False


def test_norm_ratio_found_by_its_last_name():
  rows = [{'round_num': 1, 'test_accuracy': 0.5, 'aggregator/mean_norm_ratio': 0.7}]
  assert runs.summarize(rows, prefix='test')['norm_ratio'] == 0.7


def test_curve_round_trip():
  values = [0.123456789, None, float('nan'), float('inf'), -1.0]
  decoded = runs.decode_curve(runs.encode_curve(values))
  assert decoded[0] == pytest.approx(0.123457) and decoded[1] is None
  assert math.isnan(decoded[2]) and decoded[3] == math.inf and decoded[4] == -1.0
  assert runs.decode_curve('') == []


def _spec(**changes):
  args = dict(phase=runs.REPORT_PHASE, regime='digits:#C=2', dataset='digits',
              method='fedga[counts=dataset]', algorithm='fedga', kwargs=(('counts', 'dataset'),),
              client_lr=0.1, server_lr=1.0, epochs=5, seed=3, data_seed=3, model='mlp',
              rounds=20, clients_per_round=10, batch_size=20, shuffle_buffer=1000)
  args.update(changes)
  return runs.RunSpec(**args)


def test_directories_and_result_files(tmp_path):
  spec = _spec()
  assert spec.directory('R') == os.path.join('R', 'runs', 'digits_C2', 'E5',
                                             'fedga_counts=dataset', 'seed3')
  tune = _spec(phase=runs.TUNE_PHASE, candidate='clr=0.1,slr=1')
  assert tune.directory('R') == os.path.join('R', 'tuning', 'digits_C2', 'E5',
                                             'fedga_counts=dataset', 'clr=0.1_slr=1', 'seed3')
  assert runs.read_result(str(tmp_path)) is None
  runs.write_result(str(tmp_path), {'spec': spec.to_dict(), 'summary': {'x': 1}})
  result = runs.read_result(str(tmp_path))
  assert result['summary'] == {'x': 1} and not runs.spec_differences(result['spec'], spec)
  assert runs.spec_differences(result['spec'], _spec(rounds=30)) == ['rounds: 20 -> 30']
  (tmp_path / runs.RESULT_FILE).write_text('{"spec": ')  # cut short
  assert runs.read_result(str(tmp_path)) is None


def test_a_run_stays_finished_when_an_option_is_added_at_its_default():
  recorded = _spec().to_dict()
  del recorded['client_momentum'], recorded['candidate']      # fields added later, at defaults
  assert not runs.spec_differences(recorded, _spec())
  # A builder option the recorded run did not know: at its default the run is the same run.
  assert not runs.spec_differences(recorded, _spec(kwargs=(('counts', 'dataset'),
                                                          ('form', 'soft_target'))))
  assert runs.spec_differences(recorded, _spec(kwargs=(('counts', 'dataset'),
                                                       ('form', 'paper')))) == [
      "kwargs.form: 'soft_target' -> 'paper'"]
  assert runs.spec_differences(recorded, _spec(client_momentum=0.9))


def test_a_run_recorded_before_its_spec_carried_its_settings_stays_finished():
  # A result.json of before the spec held last_k, validation_fraction, eval_train_loss and the
  # data sources: taken as made with the current values; a record that holds them is compared.
  recorded = _spec().to_dict()
  for key in runs.LATER + runs.SOURCES:
    del recorded[key]
  assert not runs.spec_differences(recorded, _spec(last_k=2, eval_train_loss=True))
  now = _spec(last_k=2).to_dict()
  assert runs.spec_differences(now, _spec(last_k=3)) == ['last_k: 2 -> 3']
  # Where the data come from is never the run's identity.
  assert not runs.spec_differences(now, _spec(last_k=2, leaf_dir='/elsewhere', cache_dir='/c'))


def test_a_spec_option_the_builder_takes_through_options_is_filled_in_too(monkeypatch):
  from tff_conflict import hparams  # pylint: disable=g-import-not-at-top
  smoothing = hparams.Hparam('FedGA', 'calibrated-label loss', 'smoothing', None, 0.0,
                             hparams.UNIT_INTERVAL, 'a later option', 'a test')
  monkeypatch.setitem(hparams.ALGORITHM_HPARAMS, 'fedga',
                      hparams.ALGORITHM_HPARAMS['fedga'] + (smoothing,))
  recorded = _spec().to_dict()
  assert not runs.spec_differences(recorded, _spec(kwargs=(('counts', 'dataset'),
                                                          ('smoothing', 0.0))))
  assert runs.spec_differences(recorded, _spec(kwargs=(('counts', 'dataset'),
                                                       ('smoothing', 0.1)))) == [
      'kwargs.smoothing: 0.0 -> 0.1']


def test_run_row_puts_the_spec_first():
  row = runs.run_row(_spec(), {'final_accuracy': 0.9})
  assert list(row)[:3] == ['regime', 'dataset', 'method']
  assert row['hparams'] == '{"counts": "dataset"}' and row['final_accuracy'] == 0.9


def test_partially_zeroed_clients_are_counted_without_diverging_the_run():
  # Some clients' updates excluded as non-finite (by the client work, zeroed; by the aggregator,
  # a NaN row it received; FedNova's wrapper): the run trains on and does not diverge, but its
  # summary counts every excluded update over the rounds.
  rows = _diverging([0.5, 0.6, 0.62], **{
      'client_work/train/num_examples': [80, 60, 40],
      'client_work/num_excluded_nonfinite': [0, 1, 2],
      'aggregator/num_excluded_nonfinite': [0, 0, 1],
      'aggregator/num_excluded_nonfinite_clients': [1, None, 0],
      'aggregator/num_excluded_zero_weight': [5, 5, 5]})
  s = runs.summarize(rows, prefix='test', num_classes=10)
  assert s['diverged'] is False and s['zeroed_rounds'] == 0
  assert s['excluded_nonfinite_updates'] == 5
  assert runs.summarize(_diverging([0.5, 0.6]), prefix='test')['excluded_nonfinite_updates'] == 0


def test_a_run_near_the_majority_class_rate_is_collapsed():
  # 80 classes (chance 0.0125, twice chance 0.025); 100 test examples, each of 5 classes 20 of
  # them (majority rate 0.2), every one predicted right: no single predicted class.
  spread = np.diag([20.0] * 5 + [0.0] * 75)
  assert runs.majority_rate(spread) == pytest.approx(0.2)
  assert runs.majority_rate(None) is None and runs.majority_rate([[float('nan')]]) is None
  for accuracies, flagged in (([0.5, 0.21, 0.21], True), ([0.5, 0.23, 0.23], False)):
    s = runs.summarize(_diverging(accuracies), prefix='test', last_k=2, num_classes=80)
    assert s['collapsed'] is False   # above twice chance: that rule alone misses it
    assert runs.collapse_columns(s, spread) == {'majority_rate': 0.2, 'collapsed': flagged}
  # Unknown majority (no confusion matrix): twice chance only.
  assert runs.at_floor(0.21, 0.0125) is False and runs.at_floor(0.21, 0.0125, 0.2) is True
  assert runs.at_floor(float('nan'), 0.1) is True and runs.at_floor(None, 0.1) is False


def test_a_runs_data_is_compared_where_recorded_and_known():
  # Records from before the data were recorded stay finished; data that cannot be found now are
  # their loader's error, not a difference.
  now = _spec(data_location='/data/a', data_digest='0123')
  before = {k: v for k, v in now.to_dict().items() if k not in ('data_location', 'data_digest')}
  assert not runs.spec_differences(before, now)
  assert not runs.spec_differences(now.to_dict(), _spec())
  assert runs.spec_differences(now.to_dict(), _spec(data_location='/data/b', data_digest='0123')
                               ) == ["data_location: '/data/a' -> '/data/b'"]
