"""README.md's summary and docs/methods.md's measured paragraphs agree with the results files
they are generated from (experiments.benchmarking.summary), and the words follow Holm."""

import json
import os
import re
import shutil

import pytest

from experiments.benchmarking import results
from experiments.benchmarking import runs
from experiments.benchmarking import summary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, 'README.md')
METHODS = os.path.join(ROOT, 'docs', 'methods.md')


def test_readme_summary_and_methods_paragraphs_match_their_results():
  text = open(README).read()
  measured = text[text.index('## What the comparison measured'):text.index('## Where to go')]
  assert '<!-- measured: readme from docs/results;' in measured
  assert summary.check_file(README) == []
  assert summary.check_file(METHODS) == []
  methods = open(METHODS).read()
  for block in ('verdicts from docs/results;',
                'fedga_forms from docs/results/diagnosis;',
                'fedga_forms from docs/results/fedga_setting;',
                'fedld_revisions from docs/results/diagnosis;'):
    assert f'<!-- measured: {block}' in methods
  # Outside the generated blocks, no verdict against FedAvg and no "paper's setting" on data
  # that is not the paper's.
  prose = measured[:measured.index('<!-- measured:')] + measured[measured.index(summary.END):]
  for word in ('beats', 'loses', 'ties FedAvg'):
    assert word not in prose
  assert "in its paper's setting" not in methods and "in its paper's setting" not in text


_WORDS = r'(beats|ties|loses|inconclusive)'
_OTHER = {'beats': 'loses', 'ties': 'beats', 'loses': 'ties', 'inconclusive': 'beats'}


@pytest.mark.parametrize('source, block, changes', [
    # The first verdict word of the paragraphs, whichever it is, and the first baseline mean.
    (METHODS, 'verdicts', ((_WORDS + ':', lambda m: _OTHER[m[1]] + ':'),
                           (re.escape('against fedavg 0.'), 'against fedavg 1.'))),
    # The README table's first baseline mean, and the first verdict it names.
    (README, 'readme', ((r'\| 0\.(\d{3}) \|', r'| 1.\1 |'),
                        (r'\| ' + _WORDS + ' /', lambda m: f'| {_OTHER[m[1]]} /'))),
])
def test_a_changed_number_or_verdict_is_caught(tmp_path, source, block, changes):
  text = open(source).read()
  block_start = text.index(f'<!-- measured: {block} ')
  for pattern, replacement in changes:
    changed = text[:block_start] + re.sub(pattern, replacement, text[block_start:], count=1)
    assert changed != text
    path = tmp_path / os.path.basename(source)
    path.write_text(changed)
    assert summary.check_file(str(path)) == [
        f'{os.path.basename(source)}: block {block} (from docs/results)']
    summary.check_file(str(path), write=True)
    assert path.read_text() == text


def _results(directory, pairs_by_seed):
  """A results directory: fedavg and fedgh at the given last-5 accuracies per seed."""
  os.makedirs(directory)
  rows = []
  for seed, values in enumerate(pairs_by_seed):
    for method, value in zip(('fedavg', 'fedgh', 'fedld'), values):
      rows.append({'regime': 'digits:iid', 'dataset': 'digits', 'method': method,
                   'algorithm': method, 'epochs': 1, 'seed': seed, 'client_lr': 0.1,
                   'server_lr': 1.0, 'hparams': '{}', 'final_accuracy': value,
                   'last_k_accuracy': value, 'diverged': False, 'diverged_round': None,
                   'collapsed': False, 'accuracy_curve': runs.encode_curve([value])})
  results.write_csv(os.path.join(directory, 'runs.csv'), rows, runs.RUN_COLUMNS)
  with open(os.path.join(directory, 'config.json'), 'w') as f:
    json.dump({'baseline': 'fedavg', 'regimes': ['digits:iid'],
               'methods': ['fedavg', 'fedgh', 'fedld'], 'epochs': [1], 'protocol': 2,
               'report_seeds': list(range(len(pairs_by_seed))), 'equivalence_margin': 0.01,
               'tuning': {'tune': False, 'last_k': 5},
               'plan': {'methods': [{'name': m, 'server_lrs': [1.0]}
                                    for m in ('fedavg', 'fedgh', 'fedld')]}}, f)


def test_words_follow_holm_and_the_equivalence_margin(tmp_path):
  # fedgh: +0.02 +- 0.001 over 10 seeds (beats after Holm); fedld: +-0.001 (ties).
  seeds = [(0.80, 0.82 + 0.001 * (s % 2), 0.80 + 0.001 * (-1) ** s) for s in range(10)]
  _results(str(tmp_path / 'a'), seeds)
  text = ' '.join(summary.render('verdicts', 'a', root=str(tmp_path)).split())
  assert 'beats: fedgh +0.020 [' in text and 'ties: fedld' in text
  assert 'Provisional' not in text
  # Three seeds where fedgh's raw interval excludes 0 but Holm's adjustment does not keep it.
  few = [(0.80, 0.83, 0.79), (0.80, 0.82, 0.80), (0.80, 0.84, 0.82)]
  _results(str(tmp_path / 'b'), few)
  rows, config, _ = results.load(str(tmp_path / 'b'))
  raw = results.difference(results.group(rows)[('digits:iid', 1)], 'fedgh', 'fedavg')
  assert raw.excludes_zero and raw.p_value < results.ALPHA
  assert not results.significant(results.comparisons(rows, config)[('digits:iid', 1, 'fedgh')])
  text = summary.render('verdicts', 'b', root=str(tmp_path))
  assert 'beats:' not in text and 'inconclusive: fedgh +0.030' in text
  assert '**Provisional**: 3 seeds.' in text


@pytest.mark.parametrize('name', ['', 'digits', 'diagnosis', 'fedga_setting'])
def test_every_published_beats_or_loses_has_a_holm_adjusted_interval_excluding_zero(name):
  # Holm's step-down interval of the comparison ranked r-th (0-based) of the family's m by raw
  # p-value is the paired t interval at confidence 1 - alpha / (m - r); a verdict may say
  # "beats" or "loses" only where it excludes 0 on that side. Outside the family: no word.
  from experiments import stats  # pylint: disable=g-import-not-at-top
  rows, config, _ = results.load(os.path.join(ROOT, 'docs', 'results', name))
  key = results.primary_statistic(config)
  cells = results.group(rows)
  family = results.family(rows, config)
  raw = {k: results.difference(cells[k[:2]], k[2], k[3], key) for k in family}
  ranked = sorted((k for k, d in raw.items()
                   if not results.identical(d) and d.p_value == d.p_value),
                  key=lambda k: raw[k].p_value)
  adjusted = {k: stats.paired_difference(
      results.by_seed(cells[k[:2]][k[2]], key), results.by_seed(cells[k[:2]][k[3]], key),
      confidence=1 - results.ALPHA / (len(ranked) - rank)) for rank, k in enumerate(ranked)}
  held = 0
  for k, d in family.items():
    verdict = results.verdict(d, results.margin(config),
                              results.at_chance(cells[k[:2]], k[2], k[3]))
    if verdict in ('beats', 'loses'):
      interval = adjusted[k]
      assert (interval.low > 0) if verdict == 'beats' else (interval.high < 0), (k, interval)
      held += 1
  assert held > 0   # the published results do contain verdicts
  for (regime, e, method), d in results.comparisons(rows, config).items():
    if (regime, e, method, config['baseline']) not in family:
      assert results.verdict(d, results.margin(config)) in (
          results.NOT_TESTED, 'identical', 'inconclusive'), (regime, method)


def test_the_readme_table_puts_each_method_under_its_holm_verdict(tmp_path):
  seeds = [(0.80, 0.82 + 0.001 * (s % 2), 0.80 + 0.001 * (-1) ** s) for s in range(10)]
  _results(str(tmp_path / 'a'), seeds)
  table = summary.render('readme', 'a', root=str(tmp_path))
  assert '| method | `digits:iid` |' in table
  # No tuning, no other baseline ran: fedavg is every baseline; fedld ties.
  assert '| fedavg (mean) | 0.800 |' in table
  assert '| fedgh | beats / beats all |' in table and '| fedld | ties / ties all |' in table
  few = [(0.80, 0.83, 0.79), (0.80, 0.82, 0.80), (0.80, 0.84, 0.82)]
  _results(str(tmp_path / 'b'), few)
  table = summary.render('readme', 'b', root=str(tmp_path))
  assert '| fedgh | inconclusive / inconclusive |' in table   # Holm keeps no verdict
  assert '**Provisional**: 3 seeds.' in table


def test_the_command_checks_the_files_quietly_and_names_a_stale_block(tmp_path):
  # As a command: no TensorFlow log and no teardown traceback; a stale block: exit 1, named.
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  command = [sys.executable, '-m', 'experiments.benchmarking.summary']
  env = {k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'}   # its own quiet()
  run = lambda *files: subprocess.run(command + list(files), cwd=ROOT, env=env, text=True,
                                      capture_output=True, timeout=300, check=False)
  checked = run(README, METHODS)
  assert (checked.returncode, checked.stdout, checked.stderr) == (0, '', '')
  stale = tmp_path / 'README.md'
  stale.write_text(open(README).read().replace('| fedavg (mean) | 0.', '| fedavg (mean) | 1.', 1))
  found = run(str(stale))
  assert found.returncode == 1 and found.stdout == ''
  assert found.stderr == 'stale: README.md: block readme (from docs/results)\n'
