"""One method's tuning search as a generator over `SearchSettings`: candidates, successive
halving's rungs, scores, edge extension and the baseline's widening; docs/design.md, "Tuning"."""

import itertools
import math
from typing import Any, Generator, Mapping, NamedTuple, Optional, Sequence

import numpy as np

from experiments.benchmarking import methods as methods_lib
from tff_conflict import hparams

Method = methods_lib.Method
HALVING_RATE = 3  # successive halving keeps the best 1 / HALVING_RATE (at least 2) at each rung
# The learning rates' hard bounds for edge extension: below, a step barely moves a model in a
# benchmark's rounds; above 10, either diverges on every model here.
LR_BOUNDS = {'client_lr': (1e-4, 10.0), 'server_lr': (0.01, 10.0)}


class SearchSettings(NamedTuple):
  """How one method's tuning searches on one dataset: `strategy` 'staged' or 'product',
  `schedule` 'full' or 'halving', `last_k` (also halving's shortest rung), `edge_steps` (the cap
  on a side without a hard bound; 0: no extension), stage 1's `server_lr` and `given` values."""
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
  """'clr=0.1,slr=1' -> {'clr': '0.1', 'slr': '1'}."""
  return dict(part.partition('=')[::2] for part in name.split(',') if part)


def candidates(settings: SearchSettings, method: Method,
               client_lr: Optional[float] = None) -> list[dict]:
  """Tuning candidates before edge extensions. Staged: stage 1 (`client_lr` None) the client lrs
  at the given values and the untuned server lr; stage 2, at `client_lr`, the grid and the server
  lrs (none if nothing more). Product: every combination of client lr, grid and server lr."""
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
  """The searched dimensions with two or more numeric values -> their values."""
  dims = (*zip(methods_lib.RATES, (settings.client_lrs, settings.server_lrs)), *method.grid)
  return {d: tuple(values) for d, values in dims if len(values) > 1 and all(
      isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)}


def batches(settings: SearchSettings, method: Method) -> list[list[dict]]:
  """The batches tuning tries before edge extensions (stage 2 at the first client lr)."""
  staged = settings.strategy != 'product'
  return [candidates(settings, method)] + (
      [candidates(settings, method, settings.client_lrs[0])] if staged else [])


def _kept(alive: int) -> int:
  """How many of `alive` a rung of halving keeps: the best third, at least 2 finalists."""
  return max(min(alive, 2), math.ceil(alive / HALVING_RATE))


def _runs(settings: SearchSettings, new: int) -> int:
  """The runs (candidate, length) `search` makes for a batch of `new` candidates."""
  alive, out = new, 0
  if settings.schedule == 'halving' and new >= HALVING_RATE:
    for _ in rungs(settings.rounds, new, settings.last_k)[:-1]:
      alive, out = _kept(alive), out + alive
  return out + alive


def max_candidates(settings: SearchSettings, method: Method) -> int:
  """The runs `search` may make at most, every possible edge extension included."""
  return (sum(_runs(settings, len(batch)) for batch in batches(settings, method))
          + sum(_steps_to_bound(settings, method, d, values, side)
                for d, values in _numeric_dimensions(settings, method).items()
                for side in (-1, 1)))


def rungs(rounds: int, num_candidates: int, min_rounds: int) -> list[int]:
  """Successive halving's run lengths, shortest first: `rounds // 3^j` for j = s..0, s the most
  rungs that `num_candidates` fill (3^s <= num_candidates) with `min_rounds` rounds or more.

  Successive halving: Jamieson and Talwalkar, "Non-stochastic Best Arm Identification and
  Hyperparameter Optimization", AISTATS 2016, arXiv:1502.07943.
  """
  s = 0
  while (HALVING_RATE ** (s + 1) <= num_candidates
         and rounds // HALVING_RATE ** (s + 1) >= max(min_rounds, 1)):
    s += 1
  return [rounds // HALVING_RATE ** j for j in range(s, -1, -1)]


def score(summaries: Sequence[Optional[dict[str, Any]]]) -> tuple[float, int]:
  """(mean `last_k_accuracy`, finished runs); NaN when a run is missing, diverged or not finite."""
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
  """`dim`'s hard bound on `side` (+1 / -1): `LR_BOUNDS`, 1 above a ratio, else None."""
  if dim in methods_lib.RATES:
    return LR_BOUNDS[dim][side > 0]
  h = methods_lib.hparam_ranges(method).get(dim)
  ratio = h is not None and h.kind in (hparams.RATIO, hparams.UNIT_INTERVAL)
  return 1.0 if side > 0 and ratio else None


def _steps_to_bound(settings: SearchSettings, method: Method, dim: str, values, side: int) -> int:
  """The most extensions of `dim` past `values` on `side`: to its bound, else `edge_steps`."""
  value, bound = (max(values) if side > 0 else min(values)), _bound(method, dim, side)
  if not settings.edge_steps or bound is None:
    return settings.edge_steps
  return max(0, math.ceil(side * math.log(bound / value, settings.edge_factor) - 1e-9))


def _record(choice: dict, runs: Sequence[tuple[dict, int, float, int]]) -> dict:
  """`choice` with the `scores` of `runs`, the number of candidates and the lrs tried."""
  scores = choice['scores'] + [{'candidate': candidate_name(c), 'rounds': r, 'score': s,
                                'seeds': n} for c, r, s, n in runs]
  values = [_candidate_values(n) for n in dict.fromkeys(s['candidate'] for s in scores)]
  return dict(choice, scores=scores, candidates=len(values),
              client_lrs_tried=sorted({float(v['clr']) for v in values if 'clr' in v}),
              server_lrs_tried=sorted({float(v['slr']) for v in values if 'slr' in v}))


def search(settings: SearchSettings, method: Method,
           **where) -> Generator[list, list, dict[str, Any]]:
  """Tunes one method: yields waves of independent requests (candidate, rounds; None: full), is
  sent their (score, finished seeds), returns the choice (tuning_choices.json's), made among
  full-length scores. Edge extension: while the winner's value of a numeric dimension is the
  largest (smallest) tried, it is tried times (divided by) `edge_factor`, up to the hard bound
  (`_bound`), else at most `edge_steps` times; `at_edge` / `at_bound` name those still there."""
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
      bound = side and _bound(method, dim, side)
      if side is None or (bound is None and steps.get((dim, side), 0) >= settings.edge_steps):
        continue
      factor, new = settings.edge_factor, winner[dim]   # clipped to the bound
      new = new * factor if side > 0 else new / factor
      new = new if bound is None else min(new, bound) if side > 0 else max(new, bound)
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
  """`choice` after also trying each of `server_lrs` it has not (a generator, as `search`)."""
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
