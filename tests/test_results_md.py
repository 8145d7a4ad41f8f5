"""RESULTS.md at the repository root: its tables match the runs.csv committed beside it
(docs/results/runs.csv), and README links it."""

import os

import pytest

from experiments.benchmarking import report
from tests.experiments.benchmarking import test_report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_MD = os.path.join(ROOT, 'RESULTS.md')


@pytest.mark.skipif(not os.path.exists(RESULTS_MD), reason='RESULTS.md not generated yet')
def test_results_md_numbers_match_its_runs_csv():
  assert os.path.exists(os.path.join(report.results_dir_for(RESULTS_MD), 'runs.csv')), (
      'RESULTS.md exists but docs/results/runs.csv does not')
  assert test_report.tables_not_in(RESULTS_MD) == []
  text = open(RESULTS_MD).read()
  assert '- Command: `python -m experiments.benchmark ' in text
  for key in ('Date', 'Machine', 'Wall time of this command'):
    assert f'- {key}' in text
  with open(os.path.join(ROOT, 'README.md')) as f:
    assert 'RESULTS.md' in f.read()
