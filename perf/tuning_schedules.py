"""Whether successive halving chooses what the full search chooses: `python -m perf.tuning_schedules
--full=DIR --halving=DIR` compares two benchmark directories' tuning_choices.json."""

import argparse
import json
import math
import os
from typing import Any, Mapping, Optional, Sequence

CHOICES_FILE = 'tuning_choices.json'


def _read(directory: str) -> dict[tuple, Mapping[str, Any]]:
  with open(os.path.join(directory, CHOICES_FILE)) as f:
    return {(c['dataset'], int(c['epochs']), c['method']): c for c in json.load(f)}


def _chosen(choice: Mapping[str, Any]) -> str:
  """The chosen candidate's name: the best-scored among the choice's tried candidates."""
  scored = [s for s in choice['scores'] if s['score'] is not None and not math.isnan(s['score'])]
  return max(scored, key=lambda s: s['score'])['candidate']


def standard_error(accuracy: float, num_examples: int) -> float:
  """The binomial standard error `sqrt(p (1 - p) / n)` of an accuracy `p` on `n` examples: the
  noise of one validation score (a mean over the last rounds varies less, so this is wide)."""
  return math.sqrt(max(accuracy * (1.0 - accuracy), 0.0) / num_examples)


def agreement(full: Mapping[tuple, Mapping[str, Any]], halving: Mapping[tuple, Mapping[str, Any]],
              validation_sizes: Mapping[str, int]) -> list[dict[str, Any]]:
  """One row per (dataset, E, method) tuned by both: the two choices, whether they agree, and
  the full search's validation score of each choice with its standard error.

  Agreement: the same candidate, or the halving choice's full-search score within one standard
  error of the full search's best (`standard_error` on the dataset's validation size). A halving
  choice the full search never ran is judged by its own score at full length, if halving ran it
  to the end.
  """
  rows = []
  for key in sorted(set(full) & set(halving)):
    f, h = full[key], halving[key]
    full_choice, halving_choice = _chosen(f), _chosen(h)
    full_scores = {s['candidate']: s['score'] for s in f['scores']}
    best = full_scores[full_choice]
    other = full_scores.get(halving_choice)
    if other is None:
      other = h['score']   # the halving choice's own full-length score
    se = standard_error(best, validation_sizes[key[0]])
    rows.append(dict(dataset=key[0], epochs=key[1], method=key[2], full=full_choice,
                     halving=halving_choice, same=full_choice == halving_choice,
                     full_score=best, halving_score=other, se=se,
                     agrees=full_choice == halving_choice or best - other <= se,
                     full_runs=len(f['scores']), halving_runs=len(h['scores'])))
  return rows


def markdown(rows: Sequence[Mapping[str, Any]]) -> str:
  lines = ['| dataset | method | full search | halving | validation score (full / halving '
           'choice) | SE | agrees |', '|---|---|---|---|---|---|---|']
  for r in rows:
    lines.append(f"| {r['dataset']} | {r['method']} | {r['full']} | "
                 f"{'same' if r['same'] else r['halving']} | {r['full_score']:.4f} / "
                 f"{r['halving_score']:.4f} | {r['se']:.4f} | {'yes' if r['agrees'] else 'NO'} |")
  agree = sum(r['agrees'] for r in rows)
  same = sum(r['same'] for r in rows)
  lines.append(f'\n{agree} of {len(rows)} choices agree ({same} the same candidate).')
  return '\n'.join(lines)


def validation_sizes(directory: str) -> dict[str, int]:
  """Each tuned dataset's number of validation examples, from the directory's config.json:
  its tuning regime loaded and split as the benchmark does (the partition seed, or with
  `vary_partition` the first tuning seed)."""
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  with open(os.path.join(directory, 'config.json')) as f:
    config = json.load(f)
  tuning = config['tuning']
  seed = (int(tuning['tuning_seeds'][0]) if config['vary_partition']
          else int(config['data']['data_seed']))
  sizes = {}
  tuned_on = config['plan'].get('tuned_on')
  for dataset, regime in (config['plan']['tuning_regimes'].items() if tuned_on is None else
                          ((data.parse_regime(r).dataset, r) for r in dict.fromkeys(
                              tuned_on.values()))):
    train, _ = data.load_regime(data.parse_regime(regime), seed=seed)
    _, validation = data.split_validation(train, tuning['validation_fraction'], seed=seed)
    sizes[dataset] = sum(1 for _ in validation.create_tf_dataset_from_all_clients())
  return sizes


def main(argv: Optional[Sequence[str]] = None) -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--full', required=True, help='benchmark directory tuned with full runs')
  parser.add_argument('--halving', required=True, help='the same tuned by successive halving')
  args = parser.parse_args(argv)
  print(markdown(agreement(_read(args.full), _read(args.halving),
                           validation_sizes(args.full))))


if __name__ == '__main__':
  main()
