"""One method's tuning search as a generator over explicit `SearchSettings` (no config): the
candidates, successive halving's rungs, the scores, edge extension and the baseline's widening;
the rules: docs/design.md, "Tuning"."""

import itertools
import math
from typing import Any, Generator, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from experiments.benchmarking import methods as methods_lib
from tff_conflict import hparams

Method = methods_lib.Method
HALVING_RATE = 3  # successive halving keeps the best 1 / HALVING_RATE (at least 2) at each rung
# The learning rates' hard bounds that edge extension stops at: a client SGD step below 1e-4, or
# a server step below 0.01 of the clients' mean update, barely moves a model in a benchmark's
# rounds; above 10 either diverges on every model here.
LR_BOUNDS = {'client_lr': (1e-4, 10.0), 'server_lr': (0.01, 10.0)}


class SearchSettings(NamedTuple):
  """How one method's tuning searches on one dataset (`plan.make` resolves them): the strategy
  ('staged' or 'product'), the schedule ('full' or 'halving'), a full run's `rounds`, the score's
  `last_k` (halving's shortest rung), `edge_steps` (edge extension's cap on a side without a
  hard bound; 0: none) and `edge_factor`, the client and server lrs searched, stage 1's
  (untuned) `server_lr`, and the method's `given` builder values (stage 1 runs its grid's at
  them)."""
  strategy: str
  schedule: str
  rounds: int
  last_k: int
  edge_steps: int
  edge_factor: float
  client_lrs: tuple
  server_lrs: tuple
  server_lr: float
  given: Mapping[str, Any]


def tuned_values(c: Mapping[str, Any]) -> dict[str, Any]:
  """A candidate's builder arguments (its values but the learning rates)."""
  return {k: v for k, v in c.items() if k not in methods_lib.RATES}


def _fmt(value: Any) -> str:
  return f'{value:g}' if isinstance(value, float) else str(value)


def candidate_name(c: Mapping[str, Any]) -> str:
  """A tuning candidate's name, e.g. 'clr=0.1,slr=1,proximal_strength=0.01'."""
  return ','.join([f'clr={_fmt(c["client_lr"])}', f'slr={_fmt(c["server_lr"])}']
                  + [f'{k}={_fmt(v)}' for k, v in sorted(tuned_values(c).items())])


def _candidate_values(name: str) -> dict[str, str]:
  """The values of a `candidate_name` as text: 'clr=0.1,slr=1' -> {'clr': '0.1', 'slr': '1'}."""
  return dict(part.partition('=')[::2] for part in name.split(',') if part)


def candidates(settings: SearchSettings, method: Method,
               client_lr: Optional[float] = None) -> list[dict]:
  """Tuning candidates ({'client_lr':, 'server_lr':, **the method's tuned arguments}) before
  edge extensions. Staged: stage 1 (`client_lr` None) tries the client lrs at the method's
  given values of its grid (named, so that stage 2 recognises the point) and the untuned server
  lr; stage 2, at the chosen `client_lr`, the method's grid and the server lrs (none if it has
  nothing more). Product: every combination of client lr, grid and server lr."""
  client_lrs, server_lrs = settings.client_lrs, settings.server_lrs
  names = [k for k, _ in method.grid]
  if settings.strategy != 'product':
    if client_lr is None:
      at_given = {k: settings.given[k] for k in names if k in settings.given}
      return [dict(at_given, client_lr=lr, server_lr=settings.server_lr) for lr in client_lrs]
    if not method.grid and len(server_lrs) < 2:
      return []
    client_lrs = [client_lr]
  return [dict(zip(names, values), client_lr=lr, server_lr=slr) for lr in client_lrs
          for values in itertools.product(*[v for _, v in method.grid]) for slr in server_lrs]


def _numeric_dimensions(settings: SearchSettings, method: Method) -> dict[str, tuple]:
  """The searched dimensions with two or more numeric values ('client_lr', 'server_lr', and the
  method's numeric grid arguments) -> their values."""
  def numeric(values):
    return len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                   for v in values)
  dims = zip(methods_lib.RATES, (settings.client_lrs, settings.server_lrs))
  return {d: tuple(values) for d, values in (*dims, *method.grid) if numeric(values)}


def unextended(settings: SearchSettings, method: Method) -> list[dict]:
  """Every candidate tuning may try before edge extensions (stage 2 at the first client lr)."""
  staged = settings.strategy != 'product'
  return candidates(settings, method) + (
      candidates(settings, method, settings.client_lrs[0]) if staged else [])


def _kept(alive: int) -> int:
  """How many of `alive` candidates a rung of successive halving keeps: the best third, and at
  least 2 (of 2 or more), so that the choice is made at full length among 2 finalists or more."""
  return max(min(alive, 2), math.ceil(alive / HALVING_RATE))


def _runs(settings: SearchSettings, new: int) -> int:
  """The runs (candidate, length) `search` makes for a batch of `new` candidates."""
  alive, out = new, 0
  if settings.schedule == 'halving' and new >= HALVING_RATE:
    for _ in rungs(settings.rounds, new, settings.last_k)[:-1]:
      alive, out = _kept(alive), out + alive
  return out + alive


def max_candidates(settings: SearchSettings, method: Method) -> int:
  """The runs (candidate, length) `search` may make at most: halving's rungs of `unextended`'s
  batches (repeats included) and every edge extension to each numeric dimension's hard bound (or
  `edge_steps` extensions where it has none), on both sides."""
  staged = settings.strategy != 'product'
  return (_runs(settings, len(candidates(settings, method)))
          + (_runs(settings, len(candidates(settings, method, settings.client_lrs[0])))
             if staged else 0)
          + sum(_steps_to_bound(settings, method, d, values, side)
                for d, values in _numeric_dimensions(settings, method).items()
                for side in (-1, 1)))


def rungs(rounds: int, num_candidates: int, min_rounds: int) -> list[int]:
  """Successive halving's run lengths, shortest first, the last `rounds`: `rounds // 3^j` for
  j = s..0, s the most rungs below `rounds` that `num_candidates` fill (3^s <= num_candidates)
  with at least `min_rounds` rounds each. Each rung keeps the best third, at least 2 (`_kept`).

  Successive halving: Jamieson and Talwalkar, "Non-stochastic Best Arm Identification and
  Hyperparameter Optimization", AISTATS 2016, arXiv:1502.07943.
  """
  s = 0
  while (HALVING_RATE ** (s + 1) <= num_candidates
         and rounds // HALVING_RATE ** (s + 1) >= max(min_rounds, 1)):
    s += 1
  return [rounds // HALVING_RATE ** j for j in range(s, -1, -1)]


def score(summaries: Sequence[Optional[dict[str, Any]]]) -> tuple[float, int]:
  """(mean of the runs' `last_k_accuracy`, number of finished runs); NaN when any run is missing,
  diverged or not finite."""
  values = [s.get('last_k_accuracy') if s else None for s in summaries]
  finished = sum(v is not None for v in values)
  diverged = any(s and (s.get('diverged') is True or str(s.get('diverged')).lower() == 'true')
                 for s in summaries)
  if diverged or finished < len(values) or not values or not all(map(math.isfinite, values)):
    return float('nan'), finished
  return float(np.mean(values)), finished


def best(scored: Sequence[tuple[Any, float, int]]) -> tuple[Any, float]:
  """The highest finite score (ties: the first); the first candidate if none is finite."""
  finite = [(c, s) for c, s, _ in scored if math.isfinite(s)]
  if not finite:
    return scored[0][0], float('nan')
  top = max(s for _, s in finite)
  return next(c for c, s in finite if s == top), top


def _edge(values, value) -> Optional[int]:
  """+1 / -1 when `value` is the largest / smallest of two or more `values`, else None."""
  if len(set(values)) < 2:
    return None
  return 1 if value == max(values) else -1 if value == min(values) else None


def _bound(method: Method, dim: str, side: int) -> Optional[float]:
  """The hard bound of `dim` on `side` (+1 above, -1 below) that edge extension stops at: the
  learning rates' `LR_BOUNDS`, 1 above a ratio's or unit interval's range (`tff_conflict.hparams`,
  whose other numeric ranges are open: a geometric extension never reaches 0 or infinity)."""
  if dim in methods_lib.RATES:
    return LR_BOUNDS[dim][side > 0]
  h = methods_lib.hparam_ranges(method).get(dim)
  ratio = h is not None and h.kind in (hparams.RATIO, hparams.UNIT_INTERVAL)
  return 1.0 if side > 0 and ratio else None


def _extension(method: Method, dim: str, value: float, side: int, factor: float) -> float:
  """`value` times (divided by) `factor`, clipped to `dim`'s hard bound on `side`."""
  new, bound = (value * factor if side > 0 else value / factor), _bound(method, dim, side)
  return new if bound is None else min(new, bound) if side > 0 else max(new, bound)


def _steps_to_bound(settings: SearchSettings, method: Method, dim: str, values, side: int) -> int:
  """The extensions of `dim` past its searched `values` on `side` that `search` may make at most:
  to its hard bound, or `edge_steps` where it has none; 0 when `edge_steps` is 0."""
  value, bound = (max(values) if side > 0 else min(values)), _bound(method, dim, side)
  if not settings.edge_steps or bound is None:
    return settings.edge_steps
  return max(0, math.ceil(side * math.log(bound / value, settings.edge_factor) - 1e-9))


def _record(choice: dict, runs: Sequence[tuple[dict, int, float, int]]) -> dict:
  """`choice` with what tuning ran: each candidate's score and finished seeds at each run length
  it ran (`scores`, in the order run), the candidates' number and the client and server learning
  rates among them (edge extensions included)."""
  scores = choice['scores'] + [{'candidate': candidate_name(c), 'rounds': r, 'score': s,
                                'seeds': n} for c, r, s, n in runs]
  values = [_candidate_values(n) for n in dict.fromkeys(s['candidate'] for s in scores)]
  return dict(choice, scores=scores, candidates=len(values),
              client_lrs_tried=sorted({float(v['clr']) for v in values if 'clr' in v}),
              server_lrs_tried=sorted({float(v['slr']) for v in values if 'slr' in v}))


def search(settings: SearchSettings, method: Method,
           **where) -> Generator[list, list, dict[str, Any]]:
  """Tunes one method as a generator: it yields a wave of evaluation requests, (candidate,
  rounds) with rounds None for a full run, that depend on none of each other, and is sent their
  (score, finished seeds) in order. Returns the choice as tuning_choices.json records it: `where`
  (dataset, regime, E), the method, the full length `rounds`, the chosen learning rates and
  `tuned` values, the winner's `score`, every candidate's at every length it ran (`scores`),
  `at_edge`: the dimensions whose chosen value is still at the edge of those tried, and
  `at_bound`: those at a hard bound.

  The choice is made among full-length scores only: halving's last rung is the full length and
  keeps at least 2 finalists (`_kept`); edge extensions run at full length.

  Edge extension (`edge_steps` > 0): while the best candidate's value of a numeric dimension is
  the largest (smallest) of that dimension's values tried (by any candidate, at any length: a
  staged search tries the client lrs at the given values, the winner may have others), it is
  tried (with the winner's other values) times (divided by) `edge_factor`, clipped to the
  dimension's hard bound (`_bound`), until the winner is interior or at the bound; on a side
  without a finite bound, at most `edge_steps` times."""
  runs: list[tuple[dict, int, float, int]] = []   # (candidate, rounds, score, seeds), each run
  scored: list[tuple[dict, float, int]] = []   # full-length scores, the choice's
  seen: set[str] = set()

  def try_all(new):
    new = list({candidate_name(c): c for c in new if candidate_name(c) not in seen}.values())
    seen.update(map(candidate_name, new))
    alive = new   # halving: each rung but the last runs those left and keeps the best
    if settings.schedule == 'halving' and len(new) >= HALVING_RATE:
      for length in rungs(settings.rounds, len(new), settings.last_k)[:-1]:
        results = yield [(c, length) for c in alive]
        runs.extend((c, length, *r) for c, r in zip(alive, results))
        order = sorted(range(len(alive)),   # NaN last; stable: ties keep the listed order
                       key=lambda i: -results[i][0] if math.isfinite(results[i][0]) else math.inf)
        alive = [alive[i] for i in sorted(order[:_kept(len(alive))])]
    results = (yield [(c, None) for c in alive]) if alive else []
    runs.extend((c, settings.rounds, *r) for c, r in zip(alive, results))
    scored.extend((c, *r) for c, r in zip(alive, results))

  yield from try_all(candidates(settings, method))
  if settings.strategy != 'product':
    yield from try_all(candidates(settings, method, best(scored)[0]['client_lr']))
  steps: dict[tuple[str, int], int] = {}
  dims = _numeric_dimensions(settings, method)
  tried = lambda dim: [c[dim] for c, *_ in runs if c.get(dim) is not None]
  moved = settings.edge_steps > 0
  while moved and math.isfinite(best(scored)[1]):
    moved = False
    for dim in dims:
      winner = best(scored)[0]
      side = _edge(tried(dim), winner.get(dim))
      if side is None or (_bound(method, dim, side) is None
                          and steps.get((dim, side), 0) >= settings.edge_steps):
        continue
      new = _extension(method, dim, winner[dim], side, settings.edge_factor)
      if (new - winner[dim]) * side <= 0 or not math.isfinite(new):
        continue
      steps[(dim, side)] = steps.get((dim, side), 0) + 1
      before = len(scored)
      yield from try_all([dict(winner, **{dim: new})])
      moved = moved or len(scored) > before
  winner, top = best(scored)
  sides = {d: _edge(tried(d), winner.get(d)) for d in dims if math.isfinite(top)}
  at_bound = [d for d, side in sides.items() if side and winner[d] == _bound(method, d, side)]
  at_edge = [d for d, side in sides.items() if side and d not in at_bound]
  return _record(dict(where, method=method.name, rounds=settings.rounds,
                      client_lr=winner['client_lr'], server_lr=winner['server_lr'],
                      tuned=tuned_values(winner), score=top, scores=[], at_edge=at_edge,
                      at_bound=at_bound), runs)


def widen_search(choice: dict, server_lrs: Sequence[float]) -> Generator[list, list, dict]:
  """`choice` after also trying, at its chosen client lr and values, each of `server_lrs` it
  has not tried (those other methods' edge extensions reached), so that the baseline searched
  every server lr any method searched; a new candidate wins if it scores higher (ties: the
  earlier choice). A generator of one wave of requests, as `search`."""
  tried = [float(_candidate_values(s['candidate']).get('slr', 'nan')) for s in choice['scores']]
  new = [dict(choice['tuned'], client_lr=choice['client_lr'], server_lr=lr)
         for lr in sorted(server_lrs) if not any(math.isclose(lr, t, rel_tol=1e-5) for t in tried)]
  if not new:
    return choice
  results = yield [(c, None) for c in new]
  scored = [(c, *r) for c, r in zip(new, results)]
  winner, top = best([(None, choice['score'], 0)] + scored)
  server_lr = choice['server_lr'] if winner is None else winner['server_lr']
  at_edge = [d for d in choice['at_edge'] if d != 'server_lr']
  at_bound = [d for d in choice.get('at_bound', []) if d != 'server_lr']
  side = _edge(tried + [c['server_lr'] for c in new], server_lr)
  if side is not None:
    (at_bound if server_lr == LR_BOUNDS['server_lr'][side > 0] else at_edge).append('server_lr')
  return _record(dict(choice, server_lr=server_lr, at_edge=at_edge, at_bound=at_bound,
                      score=choice['score'] if winner is None else top),
                 [(c, choice.get('rounds'), s, n) for c, s, n in scored])
