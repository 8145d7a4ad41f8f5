"""Why a method ties with or loses to FedAvg, measured from a runs table (`RUN_COLUMNS`); what each
section measures: docs/design.md, "The method comparison"; the causes: docs/methods.md.
"""

import collections
import dataclasses
import math
import os
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from experiments import stats

BASELINE = 'fedavg'

# Columns of `summarize_run`, in order.
RUN_COLUMNS = (
    'final_accuracy', 'best_accuracy', 'accuracy_drop', 'final_train_loss', 'train_loss_rise',
    'final_global_train_loss', 'tail_global_train_loss', 'global_train_loss_rise',
    'final_mean_logit',
    'final_rare_pair_error', 'final_common_pair_error', 'final_rare_error_share',
    'conflict_before', 'norm_ratio', 'mean_update_norm')


def _float(value) -> Optional[float]:
  if value is None or value == '':
    return None
  value = float(value)
  return None if math.isnan(value) else value


def _column(rows: Sequence[Mapping[str, Any]], name: str) -> list[float]:
  values = (_float(r.get(name)) for r in rows)
  return [v for v in values if v is not None]


def _suffix_column(rows: Sequence[Mapping[str, Any]], suffix: str) -> list[float]:
  """The values of the first column whose last path component is `suffix` (e.g. the
  aggregator's `.../norm_ratio`, not `.../mean_norm_ratio`)."""
  if not rows:
    return []
  name = next((c for c in rows[0] if c.rsplit('/', 1)[-1] == suffix and '/' in c), None)
  return [] if name is None else _column(rows, name)


def _mean(values: Sequence[float]) -> Optional[float]:
  return float(np.mean(values)) if values else None


def train_loss_rise(losses: Sequence[float]) -> float:
  """The largest rise of the training loss above its running minimum, `max_r (l_r - min_{s<r}
  l_s)` (0 for a loss that never rises): how far training went back up, the instability the
  FedProx paper shows for FedAvg with many local epochs (Fig. 1-2)."""
  rise, low = 0.0, math.inf
  for loss in losses:
    if loss > low:
      rise = max(rise, loss - low)
    low = min(low, loss)
  return rise


def summarize_run(rows: Sequence[Mapping[str, Any]]) -> collections.OrderedDict:
  """The `RUN_COLUMNS` of one run from its metrics.csv rows (`experiments.metrics_io`).

  final/best accuracy and `accuracy_drop` (best - final) from `test_accuracy`; the final
  clients' training loss and `train_loss_rise` from `train_loss`; the same of the global model's
  loss on the training data from `global_train_loss` (`--eval_train_loss`), and
  `tail_global_train_loss`, its mean over the last quarter of the evaluated rounds (a loss that
  oscillates makes the last value alone noisy); the last evaluation's
  `test_mean_logit` (the drift of the logits along the direction softmax ignores); the last
  evaluation's
  `test_rare_pair_error`, `test_common_pair_error`, `test_rare_error_share`; and the means over
  rounds of the aggregator's `conflict_fraction_before`, `norm_ratio` and `mean_update_norm`.
  A column the run does not have is None.

  A run whose every evaluated accuracy is non-finite (it diverged in its first round) has None
  accuracies: it is recorded, not refused.

  Raises:
    ValueError: if `rows` is empty or no row has a test accuracy column (never evaluated).
  """
  if not rows:
    raise ValueError('rows must hold at least one metrics row, got none')
  if not any(r.get('test_accuracy') not in (None, '') for r in rows):
    raise ValueError('rows hold no test_accuracy: was the run evaluated?')
  accuracies = _column(rows, 'test_accuracy')
  evaluated = [r for r in rows if _float(r.get('test_accuracy')) is not None] or list(rows)
  last = evaluated[-1]
  losses = _column(rows, 'train_loss')
  out = collections.OrderedDict()
  out['final_accuracy'] = accuracies[-1] if accuracies else None
  out['best_accuracy'] = max(accuracies) if accuracies else None
  out['accuracy_drop'] = max(accuracies) - accuracies[-1] if accuracies else None
  out['final_train_loss'] = losses[-1] if losses else None
  out['train_loss_rise'] = train_loss_rise(losses) if losses else None
  global_losses = _column(rows, 'global_train_loss')
  out['final_global_train_loss'] = global_losses[-1] if global_losses else None
  out['tail_global_train_loss'] = (
      _mean(global_losses[-max(1, len(global_losses) // 4):]) if global_losses else None)
  out['global_train_loss_rise'] = train_loss_rise(global_losses) if global_losses else None
  out['final_mean_logit'] = _float(last.get('test_mean_logit'))
  for name in ('rare_pair_error', 'common_pair_error', 'rare_error_share'):
    out[f'final_{name}'] = _float(last.get(f'test_{name}'))
  out['conflict_before'] = _mean(_suffix_column(rows, 'conflict_fraction_before'))
  out['norm_ratio'] = _mean(_suffix_column(rows, 'norm_ratio'))
  out['mean_update_norm'] = _mean(_suffix_column(rows, 'mean_update_norm'))
  return out


# ---- paired gaps (the statistics: `experiments.stats`) ---------------------------------------


def fmt_gap(g: Optional[stats.Interval]) -> str:
  """'+0.012 ± 0.003' (mean ± the 95% t-interval's half-width), '+0.012 (n=1)' for one seed,
  '-' for none. No significance mark: a diagnosis is exploratory (no multiplicity correction);
  the benchmark's Results tables mark what Holm's adjustment keeps."""
  if g is None:
    return '-'
  if g.n < 2:
    return f'{g.mean:+.3f} (n=1)'
  return f'{g.mean:+.3f} ± {g.half_width:.3f}'


def _by_seed(runs, regime, method, column) -> dict[Any, float]:
  out = {}
  for r in runs:
    if r['regime'] == regime and r['method'] == method:
      value = _float(r.get(column))
      if value is not None:
        out[r['seed']] = value
  return out


def gap(runs, regime, method, column='final_accuracy', baseline=BASELINE
        ) -> Optional[stats.Interval]:
  """`method - baseline` on `column`, paired over the seeds both ran in `regime`, with its 95%
  t-interval (`stats.paired_difference`); None if they share no seed."""
  return stats.paired_difference(_by_seed(runs, regime, method, column),
                                 _by_seed(runs, regime, baseline, column))


def _mean_std(runs, regime, method, column) -> Optional[tuple[float, float, int]]:
  """Mean, sample standard deviation (`stats.mean_std`) and count over seeds; None for none."""
  values = list(_by_seed(runs, regime, method, column).values())
  if not values:
    return None
  return (*stats.mean_std(values), len(values))


def _fmt(stat: Optional[tuple[float, float, int]], digits: int = 3) -> str:
  if stat is None:
    return '-'
  mean, std, n = stat
  return f'{mean:.{digits}f}' if n == 1 else f'{mean:.{digits}f} ± {std:.{digits}f}'


# ---- variants ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variant:
  """A method with one cause changed, to test a diagnosis.

  Attributes:
    name: the method name it runs under in a runs table (e.g. 'fedga_paper').
    diagnoses: the method whose loss it explains (e.g. 'fedga').
    algorithm: a name of `tff_conflict.learning.ALGORITHMS`, or 'custom' (`--client_loss`,
      `--aggregator`).
    flags: the flag values that differ from the method's run (binaries' flag names), e.g.
      `{'calibration_form': 'paper'}` or `{'server_learning_rate': 2.0}`.
    question: what its result answers.
    baseline: the method its gap is measured against (e.g. 'fedavg_clip' for a clipped
      variant); None: the report's baseline.
    parent: the method it changes one thing of, when that is not its algorithm's own method
      (e.g. 'fedga_clip' for the clipped paper form); None: the algorithm's method (a 'custom'
      variant: the method it diagnoses).
  """
  name: str
  diagnoses: str
  algorithm: str
  flags: Mapping[str, Any]
  question: str
  baseline: Optional[str] = None
  parent: Optional[str] = None

  def command_flags(self) -> list[str]:
    """The variant as command-line flags of `experiments.train`."""
    return [f'--algorithm={self.algorithm}'] + [f'--{k}={v}' for k, v in self.flags.items()]


def _variants(*variants: Variant) -> dict[str, Variant]:
  return {v.name: v for v in variants}


VARIANTS: dict[str, Variant] = _variants(
    Variant('fedga_paper', 'fedga', 'fedga', {'calibration_form': 'paper'},
            'Does the paper\'s eq. (8) taken literally (gradient p - q: classes absent from a '
            'batch muted, logits free to drift) lose what the authors\' soft-target form '
            '(the default) keeps?'),
    Variant('fedga_paper_clip', 'fedga', 'fedga',
            {'calibration_form': 'paper', 'client_clip_norm': 5.0},
            'Does the authors\' gradient clipping at 5.0 tame the paper\'s form? (compared '
            'with FedAvg clipped alike, `fedavg_clip`)', baseline='fedavg_clip',
            parent='fedga_clip'),
    Variant('fedga_clip', 'fedga', 'fedga', {'client_clip_norm': 5.0},
            'FedGA as the authors\' code trains it (soft-target form, clipping at 5.0), '
            'compared with FedAvg clipped alike (`fedavg_clip`).', baseline='fedavg_clip'),
    Variant('fedavg_clip', BASELINE, 'fedavg', {'client_clip_norm': 5.0},
            'FedAvg with the clients\' gradients clipped at 5.0: the baseline of the clipped '
            'variants (the authors\' code clips every method).'),
    Variant('fedga_dataset', 'fedga', 'fedga', {'calibration_counts': 'dataset'},
            'Do counts over the client\'s whole dataset (fewer absent classes than a '
            'mini-batch) help?'),
    Variant('fedld_server_lr', 'fedld', 'fedld', {'server_learning_rate': 4.0},
            'Does a server learning rate that compensates the shorter server step close the '
            'gap? (4.0: the lowest final training loss of {1, 2, 4} on digits, Dirichlet 0.1)'),
    Variant('fedld_preserve_norms', 'fedld', 'fedld', {'principal_preserve_norms': True},
            'Does keeping each revised update at its original length (the paper\'s stated '
            'intent for eq. (7)) close the gap without tuning a server learning rate?'),
    Variant('fedld_projection', 'fedld', 'fedld', {'principal_revision': 'projection'},
            'Is eq. (7)\'s re-weighting what loses? The plain orthogonal projection on the same '
            'principal directions instead (no lambda_l / S weights).'),
    Variant('fedld_model', 'fedld', 'fedld', {'principal_granularity': 'model'},
            'Does one principal decomposition of the whole-model updates (the paper\'s text) '
            'differ from the per-tensor one (the default, the authors\' code)?'),
    Variant('fedld_authors', 'fedld', 'fedld',
            {'principal_first_round_plain_mean': True, 'margin_form': 'batch_probabilities',
             'client_weighting': 'uniform'},
            'FedLD as the authors\' code runs it: the first round a plain mean, the margin on '
            'the batch\'s probabilities, the unweighted mean of the revised updates.'),
    Variant('fedld_margin_only', 'fedld', 'custom',
            {'client_loss': 'margin', 'aggregator': 'measured_mean'},
            'What does margin control alone (FedAvg aggregation) cost or gain?'),
    Variant('fedld_principal_only', 'fedld', 'custom',
            {'client_loss': 'ce', 'aggregator': 'principal'},
            'What does principal-gradient aggregation alone (cross-entropy) cost or gain?'),
    Variant('fedmgc_focal_only', 'fedmgc', 'custom',
            {'client_loss': 'focal', 'aggregator': 'measured_mean'},
            'What does the focal loss alone (FedAvg aggregation) cost or gain?'),
    Variant('fedmgc_dgc_only', 'fedmgc', 'custom', {'client_loss': 'ce', 'aggregator': 'dgc'},
            'What does dominant gradient correction alone (cross-entropy) cost or gain?'),
    Variant('fedavg_uniform', 'fedmgc', 'fedavg', {'client_weighting': 'uniform'},
            'Is the cost of dominant gradient correction its unweighted mean of the clients '
            '(Algorithm 2, line 9) rather than the correction?'),
    Variant('fedavg_measured', BASELINE, 'custom',
            {'client_loss': 'ce', 'aggregator': 'measured_mean'},
            'FedAvg with the conflict diagnostics: the regime\'s conflict fraction and client '
            'step length.'),
)
VARIANTS.update(_variants(
    Variant('fedprox_mu1', 'fedprox', 'fedprox', {'proximal_strength': 1.0},
            'Does the strongest proximal pull of the paper\'s grid change anything?'),
    Variant('fed_corrective_alpha1', 'fed_corrective', 'fed_corrective',
            {'corrective_alpha': 1.0},
            'Does the largest alpha change anything?'),
))

METHOD_NAMES = {
    'fedavg': 'FedAvg', 'fedprox': 'FedProx', 'fedgh': 'FedGH', 'fedmgc': 'FedMGC',
    'fedga': 'FedGA', 'fedld': 'FedLD', 'fed_corrective': 'corrective gradient weights'}


def variant_baseline(method: str, runs: Iterable[Mapping[str, Any]],
                     default: str = BASELINE) -> str:
  """The method `method` is compared with: its variant's `baseline` where that ran in `runs`
  (a clipped variant against FedAvg clipped alike), else `default`."""
  own = VARIANTS[method].baseline if method in VARIANTS else None
  if own is not None and any(r['method'] == own for r in runs):
    return own
  return default


def variants_of(method: str) -> list[Variant]:
  """The `VARIANTS` that diagnose `method`, in declaration order."""
  return [v for v in VARIANTS.values() if v.diagnoses == method]


# ---- report sections --------------------------------------------------------------------------


def _regimes(runs, method) -> list[str]:
  seen = []
  for r in runs:
    if r['method'] == method and r['regime'] not in seen:
      seen.append(r['regime'])
  return seen


def _has(runs, regime, method, column) -> bool:
  return bool(_by_seed(runs, regime, method, column))


_STATISTIC_NAMES = {'final_accuracy': 'final accuracy',
                    'last_k_accuracy': 'mean accuracy of the last rounds'}


def _gap_table(runs, method, regimes, baseline, statistic='final_accuracy') -> list[str]:
  name = _STATISTIC_NAMES.get(statistic, statistic)
  lines = [f'| regime | {baseline} {name} | {method} {name} | gap (paired, 95% CI) '
           f'| best (test-selected) - final: {method} / {baseline} |', '|---|---|---|---|---|']
  for regime in regimes:
    g = gap(runs, regime, method, statistic, baseline=baseline)
    lines.append(
        f'| {regime} | {_fmt(_mean_std(runs, regime, baseline, statistic))} | '
        f'{_fmt(_mean_std(runs, regime, method, statistic))} | '
        f'{fmt_gap(g)} | '
        f'{_fmt(_mean_std(runs, regime, method, "accuracy_drop"))} / '
        f'{_fmt(_mean_std(runs, regime, baseline, "accuracy_drop"))} |')
  return lines


def _verdict(base: Optional[stats.Interval], variant: Optional[stats.Interval]) -> str:
  """How a variant's gap to FedAvg compares with the method's own."""
  if variant is None:
    return 'not run'
  if base is None:
    return ''
  change = variant.mean - base.mean
  if abs(change) < 0.005:
    return 'no change'
  return f'{"narrows" if change > 0 else "widens"} the gap by {abs(change):.3f}'


def _variant_table(runs, method, regimes, baseline, statistic='final_accuracy') -> list[str]:
  present = [v for v in variants_of(method)
             if any(r['method'] == v.name for r in runs)]
  if not present:
    return [f'No variant of {method} was run (see `experiments.diagnosis.VARIANTS`: '
            f'{", ".join(v.name for v in variants_of(method)) or "none"}).']
  lines = ['| variant | changes | question | compared with | ' + ' | '.join(
      f'{regime}: gap' for regime in regimes) + ' |',
           '|---|---|---|---|' + '---|' * len(regimes)]
  for v in present:
    reference = variant_baseline(v.name, runs, baseline)
    cells = []
    for regime in regimes:
      base = gap(runs, regime, method, statistic, baseline=baseline)
      ours = gap(runs, regime, v.name, statistic, baseline=reference)
      cells.append('-' if ours is None else f'{fmt_gap(ours)} ({_verdict(base, ours)})')
    changes = ', '.join(f'{k}={val}' for k, val in v.flags.items())
    lines.append(f'| {v.name} | {changes} | {v.question} | {reference} | '
                 + ' | '.join(cells) + ' |')
  return lines


def _pair_error_lines(runs, method, regimes, baseline) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'final_rare_pair_error')]
  if not rows:
    return ['The runs carry no class-pair errors (`test_rare_pair_error`: the training data did '
            'not provide label counts).']
  lines = ['Test errors between classes that rarely share a client in the training partition '
           '(co-occurrence < 0.1, `tff_conflict.evaluation.confusion_by_cooccurrence`) and between '
           'the other pairs; mean error rate per ordered class pair, final round:', '',
           f'| regime | rare pairs: {method} / {baseline} | common pairs: {method} / {baseline} '
           f'| excess on rare pairs (paired) | excess on common pairs (paired) |',
           '|---|---|---|---|---|']
  findings = []
  for regime in rows:
    rare = gap(runs, regime, method, 'final_rare_pair_error', baseline)
    common = gap(runs, regime, method, 'final_common_pair_error', baseline)
    lines.append(
        f'| {regime} | {_fmt(_mean_std(runs, regime, method, "final_rare_pair_error"))} / '
        f'{_fmt(_mean_std(runs, regime, baseline, "final_rare_pair_error"))} | '
        f'{_fmt(_mean_std(runs, regime, method, "final_common_pair_error"))} / '
        f'{_fmt(_mean_std(runs, regime, baseline, "final_common_pair_error"))} | '
        f'{fmt_gap(rare)} | {fmt_gap(common)} |')
    if rare is not None and common is not None:
      if rare.mean > 0 and rare.mean > 2 * max(common.mean, 0.0):
        findings.append(f'{regime}: the extra errors concentrate on rarely co-located pairs '
                        f'({rare.mean:+.3f} per pair against {common.mean:+.3f})')
      else:
        findings.append(f'{regime}: the extra errors do not concentrate on rarely co-located '
                        f'pairs ({rare.mean:+.3f} per pair against {common.mean:+.3f} on the '
                        f'others)')
  if findings:
    lines += ['', 'Reading: ' + '; '.join(findings) + '.']
  return lines


def _logit_lines(runs, method, regimes, baseline) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'final_mean_logit')]
  if not rows:
    return []
  lines = ['Mean logit of the final global model on the test split (`test_mean_logit`; softmax '
           'ignores it, cross-entropy does not move it directly):', '',
           f'| regime | {method} | {baseline} | difference (paired) |', '|---|---|---|---|']
  for regime in rows:
    g = gap(runs, regime, method, 'final_mean_logit', baseline)
    lines.append(f'| {regime} | {_fmt(_mean_std(runs, regime, method, "final_mean_logit"), 2)} | '
                 f'{_fmt(_mean_std(runs, regime, baseline, "final_mean_logit"), 2)} | '
                 f'{fmt_gap(g)} |')
  return lines


def _norm_ratio_lines(runs, method, regimes) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'norm_ratio')]
  if not rows:
    return [f'The runs of {method} carry no `aggregator/norm_ratio`.']
  lines = ['Server-step length against the plain weighted mean of the same updates '
           '(`aggregator/norm_ratio`, mean over rounds; below 1 the server step is shorter):', '',
           '| regime | norm ratio | server learning rate that compensates it (1 / ratio) | '
           'conflict fraction before |', '|---|---|---|---|']
  for regime in rows:
    ratio = _mean_std(runs, regime, method, 'norm_ratio')
    conflict = _mean_std(runs, regime, method, 'conflict_before')
    lines.append(f'| {regime} | {_fmt(ratio)} | {1.0 / ratio[0]:.2f} | {_fmt(conflict)} |')
  return lines


def _conflict_lines(runs, method, regimes) -> list[str]:
  rows = [r for r in regimes if _has(runs, r, method, 'conflict_before')]
  if not rows:
    return []
  lines = ['Aggregator diagnostics (means over rounds):', '',
           '| regime | conflict fraction before | norm ratio |', '|---|---|---|']
  for regime in rows:
    lines.append(f'| {regime} | {_fmt(_mean_std(runs, regime, method, "conflict_before"))}'
                 f' | {_fmt(_mean_std(runs, regime, method, "norm_ratio"))} |')
  return lines


_EXPLANATIONS = {
    'fedga': 'Two properties of the paper\'s calibrated loss (gradient p - q, eqs. 8-10) can '
             'cost accuracy. (1) Muting: every class absent from a mini-batch gets zero gradient '
             'from the other classes\' examples, so pairs of classes that rarely share a client '
             'are contrasted by no client; the class-pair errors below test it. (2) Drift: the '
             'gradient\'s components sum to 1 - sum(q), not 0, so the loss is not invariant to '
             'shifting all logits by the same amount and, where sum(q) > 1 (an unbalanced batch), '
             'it falls without bound along that shift (its value goes negative); the mean logit '
             'below shows the drift. The authors\' soft-target form has gradient (sum q) p - q, '
             'whose components sum to 0: it removes the drift and keeps most of the muting. '
             'FedGA runs the soft-target form by default; the `fedga_paper` variant runs '
             'eq. (8) literally, and the clipped variants (`fedga_clip`, `fedga_paper_clip`) '
             'are compared with FedAvg clipped alike (`fedavg_clip`).',
    'fedld': 'The revised update of client i has norm |u_i| sqrt(sum_l (lambda_l / S)^2), below '
             '|u_i| whenever more than one eigenvalue is positive, so the server step is shorter '
             'than FedAvg\'s although the paper states that the length correction keeps each '
             'update\'s magnitude. The measurement below is that shrinkage; the variants with a '
             'larger server learning rate and with preserve_norms (each revised update kept at '
             'its original length) test whether it is the cause. FedLD decomposes each model '
             'tensor separately by default (the authors\' code); `fedld_model` decomposes the '
             'whole-model updates once (the paper\'s text), `fedld_projection` replaces eq. '
             '(7)\'s weights by the plain projection on the same principal directions, and '
             '`fedld_authors` adds the authors\' other choices (a plain first round, the margin '
             'on batch probabilities, an unweighted mean).',
    'fedmgc': 'Two parts can cost accuracy: the focal loss down-weights well-classified examples '
              '(smaller local steps), and dominant gradient correction takes the unweighted mean '
              'of the corrected updates. The ablations below run each part alone.',
    'fedprox': 'The proximal pull mu (w - w0) only matters when it is comparable to the loss '
               'gradient; the variants below show the gap across mu.',
    'fed_corrective': 'The correction sum_i x_i D_i is bounded by alpha through c = min_i alpha '
                      'L_i / |D_i|; the norm ratio shows how much it changes the server step.',
    'fedgh': 'FedGH only changes updates whose pairs conflict; the conflict fraction and the '
             'norm ratio show how much it changes.',
}


def _regime_label(row: Mapping[str, Any]) -> str:
  """The row's regime, with its local epochs when the table has them (`epochs`)."""
  epochs = row.get('epochs')
  return row['regime'] if epochs in (None, '') else f'{row["regime"]}, E={int(epochs)}'


def diagnose(method: str, runs: Iterable[Mapping[str, Any]], *, baseline: Optional[str] = None,
             algorithm: Optional[str] = None, regimes: Optional[Sequence[str]] = None,
             heading: bool = True, statistic: str = 'final_accuracy') -> str:
  """A Markdown section explaining `method`'s result against `baseline` from a runs table.

  Args:
    method: a method name of the table (e.g. 'fedga', or a variant such as 'fedga_paper').
    runs: the runs table (the benchmark's runs.csv rows, or `load_runs` of a `compare` / `train`
      directory): mappings with `regime`, `method`, `seed` (and optionally `epochs`: regimes are
      then reported per number of local epochs) and the `RUN_COLUMNS`; rows of the `VARIANTS` of
      `method` are used when present.
    baseline: the reference method (default: `variant_baseline`, FedAvg unless `method` is a
      variant with its own baseline that ran, e.g. `fedavg_clip`); the method's variants are
      each compared with their own (`variant_baseline`).
    algorithm: the algorithm whose explanation and measurement the section shows (default: the
      method a variant diagnoses, else `method`).
    regimes: the regime labels to report, in order (default: those `method` ran in, in table
      order; with `epochs`, labels read 'regime, E=k').
    heading: start with a `###` heading naming the method (False where the caller titles it).
    statistic: the runs table's column the gaps compare (the benchmark's primary statistic).

  Returns:
    Markdown: a `###` heading, the paired gap per regime, the method's measurement, and a table
    of its variants. Columns a run lacks show as '-'.

  Raises:
    ValueError: if `method` has no run in `runs`.
  """
  runs = [dict(r, regime=_regime_label(r)) for r in runs]
  if not any(r['method'] == method for r in runs):
    raise ValueError(f'method {method!r} has no run in the runs table')
  if algorithm is None:
    algorithm = VARIANTS[method].diagnoses if method in VARIANTS else method
  if baseline is None:
    baseline = variant_baseline(method, runs)
  regimes = list(regimes) if regimes is not None else _regimes(runs, method)
  name = METHOD_NAMES.get(method, method)
  lines = ([f'### {name} (`{method}`) against {METHOD_NAMES.get(baseline, baseline)}', '']
           if heading else [])
  if method in VARIANTS:
    lines += [f'A variant of {algorithm}: {VARIANTS[method].question}', '']
  elif algorithm in _EXPLANATIONS:
    lines += [_EXPLANATIONS[algorithm], '']
  lines += _gap_table(runs, method, regimes, baseline, statistic)
  lines += ['', '(gap: mean over seeds of the paired difference, ± the 95% t-interval\'s '
            'half-width; exploratory, without a multiplicity correction and so without a '
            'significance mark.)', '']
  if algorithm == 'fedga':
    lines += _pair_error_lines(runs, method, regimes, baseline) + ['']
    logits = _logit_lines(runs, method, regimes, baseline)
    if logits:
      lines += logits + ['']
  elif algorithm in ('fedld', 'fed_corrective'):
    lines += _norm_ratio_lines(runs, method, regimes) + ['']
  else:
    extra = _conflict_lines(runs, method, regimes)
    if extra:
      lines += extra + ['']
  if method not in VARIANTS:
    lines += ['Variants (same seeds, partition and clients; a variant changes one cause):', '']
    lines += _variant_table(runs, method, regimes, baseline, statistic)
  return '\n'.join(lines) + '\n'


def positive_control(runs: Iterable[Mapping[str, Any]], *, regime: str,
                     method: str = 'fedprox_mu1', baseline: str = BASELINE) -> str:
  """A Markdown section on FedProx's published effect (Li et al., "Federated Optimization in
  Heterogeneous Networks", MLSys 2020, Fig. 1-2): with many local epochs on Synthetic(1, 1),
  FedProx with mu = 1 trains stably where FedAvg's training loss oscillates or rises.

  Reads `tail_global_train_loss` and `global_train_loss_rise` (runs with `--eval_train_loss`:
  the global model's loss on the clients' training data, the paper's training loss) and
  `final_accuracy` of `method` and `baseline` in `regime`, paired over seeds. The effect is
  reproduced when `method`'s training loss over the last quarter of the rounds is lower and its
  largest rise above the running minimum is smaller, both with 95% intervals excluding 0, and
  that rise is at most half of the baseline's (a steadier run, not a marginally smoother one).

  Raises:
    ValueError: if either method has no run in `regime` carrying the global training loss.
  """
  runs = [dict(r, regime=_regime_label(r)) for r in runs]
  for name in (method, baseline):
    if not _has(runs, regime, name, 'tail_global_train_loss'):
      raise ValueError(f'{name!r} has no run in regime {regime!r} with the global training '
                       'loss (run with --eval_train_loss)')
  lines = [f'### Positive control: {method} against {baseline} on {regime}', '',
           f'| measure | {baseline} | {method} | difference (paired, 95% CI) |',
           '|---|---|---|---|']
  verdicts = {}
  for column, label in (('tail_global_train_loss',
                         'training loss (global model), mean of the last quarter of rounds'),
                        ('global_train_loss_rise', 'largest rise of the training loss'),
                        ('final_accuracy', 'final test accuracy')):
    g = gap(runs, regime, method, column, baseline)
    verdicts[column] = g
    lines.append(f'| {label} | {_fmt(_mean_std(runs, regime, baseline, column))} | '
                 f'{_fmt(_mean_std(runs, regime, method, column))} | '
                 f'{fmt_gap(g)} |')
  loss, rise = verdicts['tail_global_train_loss'], verdicts['global_train_loss_rise']
  baseline_rise = _mean_std(runs, regime, baseline, 'global_train_loss_rise')
  reproduced = (loss is not None and rise is not None and loss.excludes_zero and loss.mean < 0
                and rise.excludes_zero and rise.mean < 0
                and rise.mean <= -0.5 * baseline_rise[0])
  lines += ['', 'Reading: the published effect is ' + (
      'reproduced: lower and steadier training loss.' if reproduced else
      'not reproduced by these runs (it needs a lower late training loss and a largest rise at '
      'most half the baseline\'s, both at 95% confidence).')]
  return '\n'.join(lines) + '\n'


# ---- runs tables from experiment directories --------------------------------------------------


def load_runs(regime: str, directory: str, *, method: Optional[str] = None) -> list[dict]:
  """Runs-table rows from an `experiments.compare` directory (`<dir>/<method>/seed<s>/`) or, with
  `method`, from a directory of `experiments.train` runs (`<dir>/.../metrics.csv` whose parent
  folder names the seed as `seed<s>` or `..._seed<s>`)."""
  from experiments import metrics_io  # pylint: disable=g-import-not-at-top
  rows = []
  for root, _, files in sorted(os.walk(directory)):
    if 'metrics.csv' not in files:
      continue
    rel = os.path.relpath(root, directory).split(os.sep)
    seed_part = rel[-1]
    if 'seed' not in seed_part:
      continue
    seed = int(seed_part.rsplit('seed', 1)[1])
    name = method if method is not None else rel[-2] if len(rel) >= 2 else None
    if name is None:
      continue
    metrics = metrics_io.read_csv(os.path.join(root, 'metrics.csv'))
    if not metrics:
      continue
    rows.append(dict(regime=regime, method=name, seed=seed, **summarize_run(metrics)))
  return rows


# ---- the benchmark's calls (`experiments.benchmarking`) ------------------------------------

# Columns `summarize_run` adds to the benchmark's runs.csv (the others it fills itself).
BENCHMARK_SUMMARY_COLUMNS = (
    'accuracy_drop', 'train_loss_rise', 'final_global_train_loss', 'tail_global_train_loss',
    'global_train_loss_rise', 'final_mean_logit', 'final_rare_pair_error',
    'final_common_pair_error', 'final_rare_error_share', 'mean_update_norm')


def benchmark_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
  """`summarize_run`'s `BENCHMARK_SUMMARY_COLUMNS` of one run, for its runs.csv row."""
  summary = summarize_run(rows)
  return {column: summary[column] for column in BENCHMARK_SUMMARY_COLUMNS}


def report_section(method: str, algorithm: str, rows: Sequence[Mapping[str, Any]], *,
                   baseline: str = BASELINE, statistic: str = 'final_accuracy'
                   ) -> Optional[str]:
  """The benchmark report's diagnosis of `method` (of `algorithm`): `diagnose` against
  `baseline` (or the variant's own, `variant_baseline`) on runs.csv's rows, without its own
  heading; None for the baseline itself."""
  if method == baseline:
    return None
  if method in VARIANTS:
    algorithm = VARIANTS[method].diagnoses
  return diagnose(method, rows, baseline=variant_baseline(method, rows, baseline),
                  algorithm=algorithm, heading=False, statistic=statistic)


def control_section(rows: Sequence[Mapping[str, Any]], *, method: str, baseline: str) -> str:
  """`positive_control` on the positive control's runs.csv rows, without its own heading.

  Raises:
    ValueError: `method` has no run in `rows`.
  """
  regimes = sorted({_regime_label(r) for r in rows if r['method'] == method})
  if not regimes:
    raise ValueError(f'the positive control has no run of {method!r}')
  text = positive_control(rows, regime=regimes[0], method=method, baseline=baseline)
  return text.split('\n', 2)[2] if text.startswith('### ') else text
