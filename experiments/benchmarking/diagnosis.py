"""The report's per-method "Diagnosis" sections: a registry of functions from runs to Markdown.

A diagnosis explains, with measurements, why a method wins or loses against the baseline. It is
a function

    def diagnose(inputs: DiagnosisInput) -> Optional[str]:   # Markdown, or None to add nothing

registered for a method name (e.g. 'fedga_soft') or an algorithm name (e.g. 'fedga': then it runs
once for every method of that algorithm in the report):

    from experiments.benchmarking import diagnosis
    diagnosis.register('fedga', diagnose)

`report.write_report` calls every registered function whose name matches a method of the
report, in the order of the report's methods, and puts each result under
`## Diagnosis` / `### <method>`. A function sees every reporting run (`inputs.rows`, the rows of
runs.csv: regime, method, E, seed, accuracies, curves, conflict and norm diagnostics, tuned
values in `hparams`) and can open a run's own files (`inputs.run_dir(row)`: `metrics.csv` with
one row per round and every metric the process reports, `result.json` with the final test
confusion matrix). An exception in a diagnosis is shown in its section instead of stopping the
report.

Measurements a diagnosis needs in runs.csv can be added to every reporting run's row with
`runs.register_summary(fn)` (`fn(metrics rows) -> {column: value}`), computed when the run
finishes. Modules that register diagnoses or summaries are listed in `DIAGNOSIS_MODULES`; the
engine and the report import them first. Method variants that isolate a cause are registered
with `methods.register` (e.g. from the binaries' flag values, `methods.method_from_flags`) and
then named in `--methods`.
"""

import dataclasses
import importlib
import os
import traceback
from typing import Any, Callable, Mapping, Optional, Sequence

from experiments.benchmarking import runs as runs_lib


@dataclasses.dataclass(frozen=True)
class DiagnosisInput:
  """What a diagnosis function sees.

  Attributes:
    method: the method the section is about.
    algorithm: its algorithm.
    baseline: the method the report compares with.
    rows: every row of runs.csv (all methods, regimes, local epochs and seeds).
    root: the benchmark's directory (None when only runs.csv is at hand).
  """
  method: str
  algorithm: str
  baseline: str
  rows: Sequence[Mapping[str, Any]]
  root: Optional[str] = None

  def method_rows(self, method: Optional[str] = None) -> list[Mapping[str, Any]]:
    """The rows of `method` (default: this section's)."""
    name = self.method if method is None else method
    return [r for r in self.rows if r['method'] == name]

  def run_dir(self, row: Mapping[str, Any]) -> Optional[str]:
    """The directory of the run of `row` (None without `root`)."""
    if self.root is None:
      return None
    return runs_lib.report_run_dir(self.root, row['regime'], int(row['epochs']), row['method'],
                                   int(row['seed']))


DiagnosisFn = Callable[[DiagnosisInput], Optional[str]]
DIAGNOSES: dict[str, list[DiagnosisFn]] = {}

# The positive control's reading (`control`): rows of its runs.csv and its settings -> Markdown.
ControlFn = Callable[[Sequence[Mapping[str, Any]], Any], str]
CONTROL_READERS: list[ControlFn] = []

# Modules imported before the report is written, so that their `register` calls run.
DIAGNOSIS_MODULES: list[str] = ['experiments.benchmarking.method_diagnoses']


def register(name: str, fn: DiagnosisFn) -> DiagnosisFn:
  """Registers `fn` for the method or algorithm `name`; returns `fn` (usable as a decorator
  factory's result)."""
  if not callable(fn):
    raise ValueError(f'fn must be callable, got {fn!r}')
  entries = DIAGNOSES.setdefault(name, [])
  if fn not in entries:
    entries.append(fn)
  return fn


def register_control(fn: ControlFn) -> ControlFn:
  """Registers `fn(rows, control)` as a reading of the positive control's runs (`control`:
  its `control.PositiveControl`); returns `fn`."""
  if not callable(fn):
    raise ValueError(f'fn must be callable, got {fn!r}')
  if fn not in CONTROL_READERS:
    CONTROL_READERS.append(fn)
  return fn


def control_sections(rows: Sequence[Mapping[str, Any]], control) -> list[str]:
  """The Markdown of every registered control reading (a failure is shown, not raised)."""
  load_modules()
  out = []
  for fn in CONTROL_READERS:
    try:
      text = fn(list(rows), control)
    except Exception:  # pylint: disable=broad-except
      text = 'The reading failed:\n\n```\n' + traceback.format_exc(limit=5) + '```'
    if text:
      out.append(text.strip())
  return out


def load_modules() -> None:
  """Imports `DIAGNOSIS_MODULES` (their `register` / `runs.register_summary` calls run)."""
  for module in DIAGNOSIS_MODULES:
    importlib.import_module(module)


def sections(rows: Sequence[Mapping[str, Any]], methods: Sequence[tuple[str, str]], *,
             baseline: str, root: Optional[str]) -> list[tuple[str, str]]:
  """(method, Markdown) for every method (given as (name, algorithm) pairs) with a registered
  diagnosis that returned something."""
  load_modules()
  out = []
  for name, algorithm in methods:
    functions = DIAGNOSES.get(name, []) + [
        f for f in DIAGNOSES.get(algorithm, []) if algorithm != name]
    parts = []
    inputs = DiagnosisInput(method=name, algorithm=algorithm, baseline=baseline, rows=list(rows),
                            root=root if root and os.path.isdir(root) else None)
    for fn in functions:
      try:
        text = fn(inputs)
      except Exception:  # pylint: disable=broad-except
        text = ('The diagnosis failed:\n\n```\n' + traceback.format_exc(limit=5) + '```')
      if text:
        parts.append(text.strip())
    if parts:
      out.append((name, '\n\n'.join(parts)))
  return out
