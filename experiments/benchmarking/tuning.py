"""Choosing hyperparameters on a validation split, never on the test split: each method's candidates
(`Search`), their scores and the choice. The rules: docs/design.md, "Tuning".
"""

import dataclasses
import itertools
import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from experiments.benchmarking import methods as methods_lib
from experiments.benchmarking import runs as runs_lib


@dataclasses.dataclass(frozen=True)
class Candidate:
  """Hyperparameters to try: the learning rates and the method's tuned builder arguments."""
  client_lr: float
  server_lr: float
  tuned: tuple = ()

  def __post_init__(self):
    object.__setattr__(self, 'tuned', tuple(sorted(self.tuned)))

  @property
  def name(self) -> str:
    return runs_lib.candidate_name(self.client_lr, self.server_lr, dict(self.tuned))


@dataclasses.dataclass(frozen=True)
class Choice:
  """What tuning chose for one (dataset, E, method).

  Attributes:
    dataset, regime, epochs, method: where it was tuned.
    client_lr, server_lr: the chosen learning rates.
    tuned: the chosen values of the method's own grid, (name, value) pairs.
    score: the winner's mean validation accuracy (over the last k rounds and the tuning seeds).
    scores: every candidate's (name, score, number of finished seeds), in the order tried.
    at_edge: the numeric dimensions ('client_lr', 'server_lr' or a grid argument) whose chosen
      value is still the largest or smallest tried (`extend_edges`).
  """
  dataset: str
  regime: str
  epochs: int
  method: str
  client_lr: float
  server_lr: float
  tuned: tuple
  score: float
  scores: tuple
  at_edge: tuple = ()

  @property
  def values(self) -> dict[str, Any]:
    return dict(self.tuned)


@dataclasses.dataclass(frozen=True)
class Search:
  """What tuning may try for one method (`plan.make_plan` builds it).

  Attributes:
    method: the method, its grid the one to search.
    given: its given builder arguments (used where its grid does not set them), sorted pairs.
    client_lrs: the client learning rates (its fixed one, or the grid's).
    server_lr: the server learning rate of stage 1 (and the only one unless server learning
      rates are tuned).
    server_lrs: the server learning rates searched (the table's `server_lr_grid`, the same
      for every method; just `server_lr` when they are not tuned or the method fixes one).
    strategy: 'staged' or 'product' (docs/design.md, "Tuning").
    edge_steps: how many times a numeric grid whose best value is at an edge is extended past
      that edge (per dimension and side); 0: never.
    edge_factor: each extension multiplies (or divides) the edge value by this factor.
    schedule: 'full' or 'halving' (docs/design.md, "Tuning").
    rounds: a run's rounds (halving's last rung).
    min_rounds: halving's first rung has at least this many rounds (the score's last k).
  """
  method: methods_lib.Method
  given: tuple
  client_lrs: tuple
  server_lr: float
  server_lrs: tuple
  strategy: str = 'staged'
  edge_steps: int = 0
  edge_factor: float = 3.0
  schedule: str = 'full'
  rounds: int = 0
  min_rounds: int = 1


HALVING_RATE = 3  # successive halving keeps the best 1 / HALVING_RATE at each rung


def rungs(rounds: int, num_candidates: int, min_rounds: int) -> list[int]:
  """Successive halving's run lengths, shortest first, the last `rounds`: `rounds // 3^j` for
  j = s..0, s the most rungs below `rounds` that `num_candidates` fill (3^s <= num_candidates)
  with at least `min_rounds` rounds each.

  Successive halving: Jamieson and Talwalkar, "Non-stochastic Best Arm Identification and
  Hyperparameter Optimization", AISTATS 2016, arXiv:1502.07943.
  """
  s = 0
  while (HALVING_RATE ** (s + 1) <= num_candidates
         and rounds // HALVING_RATE ** (s + 1) >= max(min_rounds, 1)):
    s += 1
  return [rounds // HALVING_RATE ** j for j in range(s, -1, -1)]


def halve(candidates: Sequence['Candidate'], lengths: Sequence[int],
          evaluate: Callable[..., tuple[float, int]]) -> list['Candidate']:
  """The candidates that survive every rung but the last of `lengths`: at each, every candidate
  left runs that many rounds (`evaluate(candidate, rounds=n)`) and the best
  ceil(n / HALVING_RATE) are kept (NaN scores last, ties: the first listed), in listed order."""
  alive = list(candidates)
  for length in lengths[:-1]:
    scores = [evaluate(candidate, rounds=length)[0] for candidate in alive]
    keep = max(1, math.ceil(len(alive) / HALVING_RATE))
    order = sorted(range(len(alive)), key=lambda i: (not math.isfinite(scores[i]),
                                                     -scores[i] if math.isfinite(scores[i])
                                                     else 0.0, i))
    alive = [alive[i] for i in sorted(order[:keep])]
  return alive


def _grid_product(method: methods_lib.Method, server_lrs: Sequence[float]):
  names = [k for k, _ in method.grid]
  for values in itertools.product(*[v for _, v in method.grid]):
    for server_lr in server_lrs:
      yield tuple(zip(names, values)), server_lr


def stage_one(search: Search) -> list[Candidate]:
  """Client learning rates at the method's given values (server lr: the untuned one).

  The given values of the method's grid arguments are named in the candidates, so that stage 2
  recognises the same point."""
  given = dict(search.given)
  at_given = tuple((k, given[k]) for k, _ in search.method.grid if k in given)
  return [Candidate(lr, search.server_lr, at_given) for lr in search.client_lrs]


def stage_two(search: Search, client_lr: float) -> list[Candidate]:
  """The method's own grid and the server lrs at `client_lr`; empty if the method has nothing
  more to tune."""
  if not search.method.grid and len(search.server_lrs) < 2:
    return []
  return [Candidate(client_lr, slr, tuned)
          for tuned, slr in _grid_product(search.method, search.server_lrs)]


def product(search: Search) -> list[Candidate]:
  """Every combination of client lr, the method's grid and (if tuned) server lr."""
  return [Candidate(lr, slr, tuned) for lr in search.client_lrs
          for tuned, slr in _grid_product(search.method, search.server_lrs)]


def candidates(search: Search) -> list[Candidate]:
  """The candidates of the grid `tune_method` may try (stage 2 at the first client lr, repeats
  included), before edge extensions (`max_extensions`)."""
  if search.strategy == 'product':
    return product(search)
  return stage_one(search) + stage_two(search, search.client_lrs[0])


def max_extensions(search: Search) -> int:
  """Edge extensions `tune_method` may add at most: `edge_steps` per side of every numeric
  dimension."""
  return 2 * search.edge_steps * len(numeric_dimensions(search))


def numeric_dimensions(search: Search) -> list[str]:
  """The searched dimensions with two or more numeric values: 'client_lr', 'server_lr', and the
  method's numeric grid arguments."""
  def numeric(values):
    return len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in values)
  dims = [d for d, values in (('client_lr', search.client_lrs),
                              ('server_lr', search.server_lrs)) if numeric(values)]
  return dims + [k for k, values in search.method.grid if numeric(values)]


def _value(candidate: Candidate, dim: str):
  if dim in ('client_lr', 'server_lr'):
    return getattr(candidate, dim)
  return dict(candidate.tuned).get(dim)


def _moved(candidate: Candidate, dim: str, value) -> Candidate:
  if dim in ('client_lr', 'server_lr'):
    return dataclasses.replace(candidate, **{dim: value})
  return dataclasses.replace(candidate, tuned=tuple(dict(candidate.tuned, **{dim: value}).items()))


def _tried(scored, dim: str) -> list:
  """Every value of `dim` tried, whatever the other dimensions' values: a staged search tries
  the client lrs at the method's default values and the winner may have others, so the edge is
  that of everything tried, not of the winner's own line."""
  return [v for v in (_value(c, dim) for c, _, _ in scored) if v is not None]


def _valid(search: Search, dim: str, value) -> bool:
  """Whether `value` is in the valid range of `dim` (`tff_conflict.hparams`; rates: > 0)."""
  if not math.isfinite(value) or value <= 0:
    return False
  if dim in ('client_lr', 'server_lr'):
    return True
  h = methods_lib.hparam_ranges(search.method).get(dim)
  if h is not None:
    try:
      h.check(value)
    except ValueError:
      return False
  return True


def _edge(values, value) -> Optional[int]:
  """+1 / -1 when `value` is the largest / smallest of two or more `values`, else None."""
  if len(set(values)) < 2:
    return None
  if value == max(values):
    return 1
  if value == min(values):
    return -1
  return None


def score(summaries: Sequence[Optional[dict[str, Any]]]) -> tuple[float, int]:
  """(mean of the runs' `last_k_accuracy`, number of finished runs); NaN when any run is missing,
  diverged or not finite."""
  values = [s.get('last_k_accuracy') if s else None for s in summaries]
  if any(s and str(s.get('diverged')).lower() == 'true' for s in summaries):
    return float('nan'), sum(v is not None for v in values)
  finished = sum(v is not None for v in values)
  if finished < len(values) or not values:
    return float('nan'), finished
  if any(not math.isfinite(v) for v in values):
    return float('nan'), finished
  return float(np.mean(values)), finished


def best(scored: Sequence[tuple[Candidate, float, int]]) -> tuple[Candidate, float]:
  """The highest finite score (ties: the first); the first candidate if none is finite."""
  finite = [(c, s) for c, s, _ in scored if math.isfinite(s)]
  if not finite:
    return scored[0][0], float('nan')
  top = max(s for _, s in finite)
  return next(c for c, s in finite if s == top), top


RunFn = Callable[[Candidate], tuple[float, int]]


def tune_method(search: Search, *, dataset: str, regime: str, epochs: int,
                evaluate: RunFn) -> Choice:
  """Tunes one method; `evaluate(candidate)` runs it on every tuning seed and returns
  (score, finished seeds); with halving, `evaluate(candidate, rounds=n)` runs n rounds."""
  scored: list[tuple[Candidate, float, int]] = []
  seen: dict[str, tuple[float, int]] = {}

  def try_all(candidates_):
    new = list({c.name: c for c in candidates_ if c.name not in seen}.values())
    survivors = new
    if search.schedule == 'halving' and len(new) >= HALVING_RATE:
      survivors = halve(new, rungs(search.rounds, len(new), search.min_rounds), evaluate)
    for candidate in new:
      if candidate in survivors:
        seen[candidate.name] = evaluate(candidate)
      else:
        seen[candidate.name] = (float('nan'), 0)  # stopped early by halving
      scored.append((candidate, *seen[candidate.name]))

  if search.strategy == 'product':
    try_all(product(search))
  else:
    try_all(stage_one(search))
    chosen, _ = best(scored)
    try_all(stage_two(search, chosen.client_lr))
  at_edge = extend_edges(search, scored, try_all)
  winner, top = best(scored)
  return Choice(dataset=dataset, regime=regime, epochs=epochs, method=search.method.name,
                client_lr=winner.client_lr, server_lr=winner.server_lr, tuned=winner.tuned,
                score=top, scores=tuple((c.name, s, n) for c, s, n in scored), at_edge=at_edge)


def widen_server_lrs(choice: Choice, server_lrs: Sequence[float], evaluate: RunFn) -> Choice:
  """`choice` after also trying, at its chosen client lr and own values, each of `server_lrs`
  it has not tried (those other methods' edge extensions reached), so that the baseline
  searched every server lr any method searched; a new candidate is chosen if it scores higher
  (ties: the earlier choice)."""
  tried = [float(runs_lib.candidate_values(n).get('slr', 'nan')) for n, _, _ in choice.scores]
  new = [Candidate(choice.client_lr, lr, choice.tuned) for lr in sorted(server_lrs)
         if not any(math.isclose(lr, t, rel_tol=1e-5) for t in tried)]
  if not new:
    return choice
  scored = [(c, *evaluate(c)) for c in new]
  winner, top = best([(None, choice.score, 0)] + scored)
  server_lr = choice.server_lr if winner is None else winner.server_lr
  at_edge = tuple(d for d in choice.at_edge if d != 'server_lr')
  if _edge(tried + [c.server_lr for c in new], server_lr) is not None:
    at_edge += ('server_lr',)
  return dataclasses.replace(
      choice, server_lr=server_lr, score=choice.score if winner is None else top,
      at_edge=at_edge, scores=choice.scores + tuple((c.name, s, n) for c, s, n in scored))


def extend_edges(search: Search, scored: list, try_all: Callable[[list], None]) -> tuple:
  """While the best candidate's value of a numeric dimension is the largest (smallest) of that
  dimension's values tried, tries it (with the winner's other values) times (divided by)
  `edge_factor`, at most `edge_steps` times per
  dimension and side and within the dimension's valid range; returns the dimensions whose best
  value is still at an edge."""
  steps: dict[tuple[str, int], int] = {}
  dims = numeric_dimensions(search)
  moved = True
  while moved:
    moved = False
    for dim in dims:
      winner, top = best(scored)
      if not math.isfinite(top):
        return ()
      value = _value(winner, dim)
      side = _edge(_tried(scored, dim), value)
      if side is None or steps.get((dim, side), 0) >= search.edge_steps:
        continue
      new = value * search.edge_factor if side > 0 else value / search.edge_factor
      if not _valid(search, dim, new):
        continue
      steps[(dim, side)] = steps.get((dim, side), 0) + 1
      before = len(scored)
      try_all([_moved(winner, dim, new)])
      moved = moved or len(scored) > before
  winner, top = best(scored)
  if not math.isfinite(top):
    return ()
  return tuple(d for d in dims
               if _edge(_tried(scored, d), _value(winner, d)) is not None)
