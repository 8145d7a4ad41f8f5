"""One benchmark run: its settings (`RunSpec`), directory, summary and `result.json` (a run is
finished when it exists)."""

import dataclasses
import json
import math
import os
import re
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from tff_conflict import _files as files

RESULT_FILE = 'result.json'
REPORT_PHASE = 'report'
TUNE_PHASE = 'tune'

TRAIN_LOSS = 'train_loss'
GLOBAL_TRAIN_LOSS = 'global_train_loss'   # the global model's loss on the clients' union
# Summary key -> the metric averaged over rounds: this column, else the first ending so.
DIAGNOSTICS = {'conflict_before': 'aggregator/conflict_fraction_before',
               'conflict_after': 'aggregator/conflict_fraction_after',
               'norm_ratio': 'aggregator/norm_ratio'}
# Updates left out as non-finite by the client work (zeroed) and by the aggregator (a NaN row).
EXCLUDED_NON_FINITE = ('num_excluded_nonfinite', 'num_excluded_nonfinite_clients')
# A run is collapsed below `COLLAPSE_FACTOR` x chance or `COLLAPSE_MARGIN` above the majority
# rate (`at_floor`), or when it predicts one class for `COLLAPSE_SHARE` of the examples.
COLLAPSE_FACTOR = 2.0
COLLAPSE_MARGIN = 0.02
COLLAPSE_SHARE = 0.9


def slug(text: str) -> str:
  """`text` as a file name: letters, digits, '.', '=' and '-'; other runs become '_'."""
  return re.sub(r'[^A-Za-z0-9.=-]+', '_', str(text)).strip('_') or '_'


@dataclasses.dataclass(frozen=True)
class RunSpec:
  """Everything one run needs: REPORT_PHASE trains on the training data and evaluates on the
  test split, TUNE_PHASE on the fit and validation parts; `kwargs` are sorted (name, value)
  pairs; `SOURCES` say where its data are read, `data_location` / `data_digest` what they were
  (`fingerprints.of_source`; None: your own data)."""
  phase: str
  regime: str
  dataset: str
  method: str
  algorithm: str
  kwargs: tuple
  client_lr: float
  server_lr: float
  epochs: int
  seed: int
  data_seed: int
  model: str
  rounds: int
  clients_per_round: int
  batch_size: int
  shuffle_buffer: int
  client_momentum: float = 0.0
  candidate: str = ''
  last_k: int = 5
  validation_fraction: float = 0.0
  eval_train_loss: bool = False
  data_dir: Optional[str] = None
  leaf_dir: Optional[str] = None
  cache_dir: Optional[str] = None
  data_location: Optional[str] = None
  data_digest: Optional[str] = None

  def to_dict(self) -> dict[str, Any]:
    return dict(dataclasses.asdict(self), kwargs=dict(self.kwargs))

  @property
  def eval_prefix(self) -> str:
    return 'test' if self.phase == REPORT_PHASE else 'val'

  def directory(self, root: str) -> str:
    if self.phase == REPORT_PHASE:
      return report_run_dir(root, self.regime, self.epochs, self.method, self.seed)
    return os.path.join(root, 'tuning', slug(self.regime.replace('#C=', 'C')),
                        f'E{self.epochs}', slug(self.method), slug(self.candidate),
                        f'seed{self.seed}')

  def label(self) -> str:
    what = f'{self.method} {self.candidate}' if self.candidate else self.method
    return f'{self.phase} {self.regime} E={self.epochs} {what} seed {self.seed}'


def report_run_dir(root: str, regime: str, epochs: int, method: str, seed: int) -> str:
  """The directory of a reporting run (`metrics.csv`, `hparams.csv`, `result.json`)."""
  return os.path.join(root, 'runs', slug(regime.replace('#C=', 'C')), f'E{epochs}', slug(method),
                      f'seed{seed}')


# runs.csv: one row per reporting run, these columns first (then any other summary key).
RUN_COLUMNS = (
    'regime', 'dataset', 'method', 'algorithm', 'epochs', 'seed', 'data_seed', 'model', 'rounds',
    'clients_per_round', 'batch_size', 'client_lr', 'server_lr', 'hparams', 'final_accuracy',
    'best_accuracy', 'best_round', 'last_k_accuracy', 'final_loss', 'final_macro_f1',
    'final_train_loss', 'diverged', 'diverged_round', 'zeroed_rounds', 'excluded_nonfinite_updates',
    'collapsed', 'chance_accuracy', 'majority_rate', 'conflict_before', 'conflict_after',
    'norm_ratio', 'seconds_per_round', 'first_round_s', 'run_seconds', 'final_global_train_loss',
    'accuracy_curve', 'train_loss_curve', 'conflict_curve', 'global_train_loss_curve')


def run_row(spec: RunSpec, summary: Mapping[str, Any]) -> dict[str, Any]:
  """The runs.csv row of a finished reporting run."""
  row = {k: getattr(spec, k) for k in RUN_COLUMNS[:RUN_COLUMNS.index('hparams')]}
  row['hparams'] = json.dumps(dict(spec.kwargs), sort_keys=True, default=_json_default)
  return dict(row, **summary)


def encode_curve(values: Sequence[Optional[float]]) -> str:
  """Values joined by ';' (6 significant digits; '' for a missing value, 'nan', 'inf')."""
  return ';'.join('' if v is None else f'{v:.6g}' if math.isfinite(v) else str(float(v))
                  for v in values)


def decode_curve(text: Any) -> list[Optional[float]]:
  """The inverse of `encode_curve`."""
  if text is None or text == '':
    return []
  return [None if v == '' else float(v) for v in str(text).split(';')]


def counted_accuracy(accuracy: Optional[float], round_num: int, diverged_round: Optional[int],
                     chance: Optional[float]) -> Optional[float]:
  """Round `round_num`'s accuracy as counted: chance (where known) from `diverged_round` on."""
  if diverged_round is not None and chance is not None and round_num >= diverged_round:
    return chance
  return accuracy


def counted_curve(row: Mapping[str, Any]) -> list[Optional[float]]:
  """A runs.csv row's test accuracy per round (1, 2, ...) as counted (`counted_accuracy`)."""
  return [None if a is None else counted_accuracy(a, r, row.get('diverged_round'),
                                                  row.get('chance_accuracy'))
          for r, a in enumerate(decode_curve(row.get('accuracy_curve')), start=1)]


def _finite(value) -> bool:
  return value is not None and math.isfinite(float(value))


def summarize(rows: Sequence[Mapping[str, Any]], *, prefix: str, last_k: int = 5,
              num_classes: Optional[int] = None) -> dict[str, Any]:
  """A run's summary from its metrics rows, `last_k_accuracy` (the mean of the last `last_k`
  evaluated rounds) the primary statistic. From the first round with a non-finite accuracy or
  loss, no example trained or a rejected server update, a run's accuracies count as chance."""
  columns = list(rows[0]) if rows else []
  find = lambda suffix: [c for c in columns if c.endswith(suffix)]
  examples = next(iter(find('train/num_examples')), None)
  zeroed = [r['round_num'] for r in rows
            if r.get(examples) is not None and float(r[examples]) == 0]
  rejected = find('update_non_finite')
  watched = (f'{prefix}_accuracy', f'{prefix}_loss', TRAIN_LOSS, GLOBAL_TRAIN_LOSS)

  def diverges(row) -> bool:
    return (row['round_num'] in zeroed
            or any(row.get(c) is not None and float(row[c]) > 0 for c in rejected)
            or any(row.get(c) is not None and not _finite(row[c]) for c in watched))
  diverged_round = next((int(r['round_num']) for r in rows if diverges(r)), None)
  chance = 1.0 / num_classes if num_classes else None
  raw = [r.get(f'{prefix}_accuracy') for r in rows]
  evaluated = [(r['round_num'], counted_accuracy(a, r['round_num'], diverged_round, chance))
               for r, a in zip(rows, raw) if a is not None]
  accuracies = [a for _, a in evaluated]
  finite = [(n, a) for n, a in evaluated if math.isfinite(a)]
  best_round, best = max(finite, key=lambda p: (p[1], -p[0])) if finite else (None, None)
  tail = accuracies[-last_k:]
  last_k_accuracy = (None if not tail else float(np.mean(tail))
                     if all(map(math.isfinite, tail)) else float('nan'))
  last = [r for r in rows if r.get(f'{prefix}_accuracy') is not None]
  final = accuracies[-1] if accuracies else None
  timed = [r for r in rows if r.get('round_time_s') is not None]
  times = [r['round_time_s'] for r in timed]
  later = [r['round_time_s'] for r in timed if r['round_num'] >= 2]
  summary = {
      'final_accuracy': final, 'best_accuracy': best, 'best_round': best_round,
      'last_k_accuracy': last_k_accuracy,
      'final_loss': last[-1].get(f'{prefix}_loss') if last else None,
      'final_macro_f1': last[-1].get(f'{prefix}_macro_f1') if last else None,
      'final_train_loss': rows[-1].get(TRAIN_LOSS) if rows else None,
      'diverged': diverged_round is not None, 'diverged_round': diverged_round,
      'zeroed_rounds': len(zeroed),
      'excluded_nonfinite_updates': int(sum(
          float(r[c]) for r in rows for c in columns
          if c.rsplit('/', 1)[-1] in EXCLUDED_NON_FINITE and _finite(r.get(c)))),
      'chance_accuracy': chance, 'collapsed': at_floor(last_k_accuracy, chance),
      'seconds_per_round': float(np.mean(later or times)) if times else None,
      'first_round_s': times[0] if times else None,
      'accuracy_curve': encode_curve(raw),
      'train_loss_curve': encode_curve([r.get(TRAIN_LOSS) for r in rows]),
      'final_global_train_loss': next((r[GLOBAL_TRAIN_LOSS] for r in reversed(rows)
                                       if r.get(GLOBAL_TRAIN_LOSS) is not None), None),
      'global_train_loss_curve': encode_curve([r.get(GLOBAL_TRAIN_LOSS) for r in rows])
                                 if GLOBAL_TRAIN_LOSS in columns else '',
  }
  for key, exact in DIAGNOSTICS.items():
    column = exact if exact in columns else next(iter(find(exact.rsplit('/', 1)[-1])), None)
    values = [float(r[column]) for r in rows if column and _finite(r.get(column))]
    summary[key] = float(np.mean(values)) if values else None
    if key == 'conflict_before':
      summary['conflict_curve'] = encode_curve([r.get(column) for r in rows]) if column else ''
  return summary


def at_floor(statistic: Optional[float], chance: Optional[float],
             majority: Optional[float] = None) -> bool:
  """Whether `statistic` is below `COLLAPSE_FACTOR` x `chance` or `majority + COLLAPSE_MARGIN`."""
  if statistic is None or chance is None:
    return False
  floor = max(COLLAPSE_FACTOR * chance, -math.inf if majority is None
              else majority + COLLAPSE_MARGIN)
  return not statistic >= floor


def _largest_share(confusion, axis: int) -> Optional[float]:
  """The largest sum along `axis` of a confusion matrix over its total (None: none, NaN, empty)."""
  matrix = np.asarray(confusion if confusion is not None else np.nan, dtype=np.float64)
  if matrix.ndim != 2 or not np.all(np.isfinite(matrix)) or matrix.sum() <= 0:
    return None
  return float(matrix.sum(axis=axis).max() / matrix.sum())


def majority_rate(confusion) -> Optional[float]:
  """The test split's majority-class rate (the largest true-class share), None if unknown."""
  return _largest_share(confusion, 1)


def collapse_columns(summary: Mapping[str, Any], confusion) -> dict[str, Any]:
  """runs.csv's `majority_rate` and `collapsed`: at the floor, diverged or predicting one class."""
  majority = majority_rate(confusion)
  return {'majority_rate': majority, 'collapsed': bool(
      summary['collapsed'] or summary['diverged'] or predicts_one_class(confusion)
      or at_floor(summary['last_k_accuracy'], summary['chance_accuracy'], majority))}


def predicts_one_class(confusion) -> bool:
  """Whether a confusion matrix (rows: true class) predicts one class for `COLLAPSE_SHARE`."""
  share = _largest_share(confusion, 0)
  return share is not None and share >= COLLAPSE_SHARE


def read_result(run_dir: str) -> Optional[dict[str, Any]]:
  """The run's `result.json`, or None when it is missing or unreadable (an interrupted write)."""
  try:
    with open(os.path.join(run_dir, RESULT_FILE)) as f:
      result = json.load(f)
  except (OSError, ValueError):
    return None
  return result if isinstance(result, dict) and 'spec' in result else None


def write_result(run_dir: str, result: Mapping[str, Any]) -> None:
  files.write_json_atomically(os.path.join(run_dir, RESULT_FILE), result, default=_json_default)


def _json_default(value):
  if isinstance(value, (np.generic, np.ndarray)):
    return value.tolist()
  raise TypeError(f'not JSON-serializable: {type(value)}')


def _json(value: Any) -> Any:
  return json.loads(json.dumps(value, default=_json_default))


def _identity(settings: Mapping[str, Any]) -> dict[str, Any]:
  """A run's settings as JSON (`kwargs.<name>`), with the defaults of its builder filled in."""
  import inspect  # pylint: disable=g-import-not-at-top
  from tff_conflict import hparams  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  out = {f.name: _json(f.default) for f in dataclasses.fields(RunSpec)
         if f.default is not dataclasses.MISSING}
  out.update(settings)
  algorithm = out.get('algorithm')
  kwargs = {h.keyword: h.default for h in hparams.ALGORITHM_HPARAMS.get(algorithm, ())}
  kwargs.update((name, p.default) for name, p in inspect.signature(
      learning.ALGORITHMS.get(algorithm, learning.build_process)).parameters.items()
                if p.kind == p.KEYWORD_ONLY and p.default is not inspect.Parameter.empty)
  kwargs.update(out.pop('kwargs', None) or {})
  out.update((f'kwargs.{k}', v) for k, v in _json(kwargs).items())
  return out


# Where a run's data come from, not what the run is: never compared.
SOURCES = ('data_dir', 'leaf_dir', 'cache_dir')
# Settings runs record only lately: a record without one is taken as made with the current value.
LATER = ('last_k', 'validation_fraction', 'eval_train_loss', 'data_location', 'data_digest')


def spec_differences(recorded: Mapping[str, Any], spec: RunSpec) -> list[str]:
  """'name: recorded -> current' for each setting that differs (`_identity`), `SOURCES` ignored
  and `LATER` compared only where recorded and known now."""
  ignored = set(SOURCES) | {k for k in LATER if k not in recorded or getattr(spec, k) is None}
  recorded, current = _identity(recorded), _identity(_json(spec.to_dict()))
  return [f'{k}: {recorded.get(k)!r} -> {current.get(k)!r}'
          for k in sorted(set(recorded) | set(current))
          if k not in ignored and recorded.get(k) != current.get(k)]
