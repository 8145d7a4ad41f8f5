"""docs/experiments.md's FedGA section speaks from its results: each committed table.md is the
tool's rendering of its docs/results directory, and every three-decimal number of the section is
one of those tables' (ours or the paper's)."""

import pathlib
import re

import pytest

from tools import paper_table

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ('docs/results/fedga_table', 'docs/results/fedga_table_glorot')


def _section() -> str:
  text = (ROOT / 'docs' / 'experiments.md').read_text()
  start = text.index("#### FedGA's Table 1 beside ours: results and the levels")
  end = text.find('\n#', start + 10)
  return text[start:end if end > 0 else len(text)]


@pytest.mark.parametrize('name', RESULTS)
def test_each_table_is_the_tools_rendering_of_its_results(name, monkeypatch):
  monkeypatch.chdir(ROOT)
  assert paper_table.render(paper_table.load(name), name) == (ROOT / name / 'table.md').read_text()


def test_every_number_of_the_section_is_in_the_tables():
  tables = ' '.join((ROOT / n / 'table.md').read_text() for n in RESULTS)
  numbers = set(re.findall(r'[+-]?\d\.\d{3}\b', _section()))
  missing = {n for n in numbers if n not in tables and n.lstrip('+') not in tables
             and n.lstrip('+-') not in tables}
  assert len(numbers) > 40 and not missing, missing


def test_the_sections_table_is_the_preset_runs():
  """The section's table, row by row, from docs/results/fedga_table/table.md."""
  ours = (ROOT / RESULTS[0] / 'table.md').read_text()
  rows = [r for r in _section().splitlines() if re.match(r'\| (0\.05|0\.1|0\.5|1|10) \|', r)]
  assert len(rows) == 5
  for row in rows:
    cells = [c.strip() for c in row.strip('|').split('|')]
    alpha = cells[0]
    avg = re.search(rf'\| {re.escape(alpha)} \| FedAvg \| ([\d.]+) ± [\d.]+ \| ([\d.]+) ± [\d.]+ '
                    r'\| ([\d.]+) ', ours)
    ga = re.search(rf'\| {re.escape(alpha)} \| FedGA \| ([\d.]+) ± [\d.]+ \| ([\d.]+) ± [\d.]+ '
                   r'\| ([\d.]+) ', ours)
    gains = ours[ours.index('FedGA - FedAvg'):]
    gain = re.search(rf'\| {re.escape(alpha)} \| [^|]+ \| ([^|]+) \| ([^|]+) \|', gains)
    assert cells[1:4] == list(avg.groups()) and cells[4:7] == list(ga.groups())
    assert cells[7:9] == [gain[1].strip(), gain[2].strip()]
