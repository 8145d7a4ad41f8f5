"""`ClientControls`: SCAFFOLD's client controls c_i kept between rounds, outside TFF (TFF 0.87's
learning processes have no client state): the cohort's inputs before a round, the new controls
from its output after it, save and restore as NumPy arrays. docs/design.md, "Client state".
"""

import collections
import dataclasses
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

from tff_conflict import _checks
from tff_conflict.learning import scaffold

_FIELDS = ('controls', 'participated', 'version')


@dataclasses.dataclass
class _Undo:
  version: int
  rows: np.ndarray
  controls: np.ndarray
  participated: np.ndarray


class ClientControls:
  """The controls c_i of a federation's N clients (zeros until a client first trains).

  Usage in a user's own loop (`build_scaffold(..., num_clients=len(client_ids))`):

      controls = ClientControls.for_process(process, client_ids)
      for round_num in range(1, rounds + 1):
        cohort = ...                                       # this round's client ids
        inputs = controls.for_cohort(cohort, [make_dataset(c) for c in cohort])
        output = process.next(state, inputs)
        state = output.state
        metrics = controls.update(cohort, output)          # the metrics without the controls

  Memory: one dense `[N, d]` array, allocated by the OS page by page as clients first train
  (`np.zeros`), so a client that never took part costs nothing.

  Args:
    client_ids: the ids of the N clients of the federation (distinct).
    size: d, the length of one control (the number of trainable scalars of the model).
    dtype: the controls' dtype (the model's: float32 unless a weight is float64).
  """

  def __init__(self, client_ids: Sequence[Any], size: int, dtype: Any = np.float32):
    ids = list(client_ids)
    if not ids:
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          'client_ids must name at least one client, got an empty list'))
    index = {}
    for i, cid in enumerate(ids):
      if cid in index:
        raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
            f'client_ids must be distinct, got {cid!r} twice'))
      index[cid] = i
    size = _checks.check_int('size', size, minimum=1)
    self._ids = ids
    self._index = index
    self._controls = np.zeros((len(ids), int(size)), np.dtype(dtype))
    self._participated = np.zeros(len(ids), bool)
    self._version = 0
    self._undo: Optional[_Undo] = None
    self._cohort: Optional[tuple[list[Any], np.ndarray]] = None  # `for_cohort`'s ids and rows

  @classmethod
  def for_process(cls, process: Any, client_ids: Sequence[Any]) -> 'ClientControls':
    """The store for `process` (from `build_scaffold`), its size and dtype read from the type of
    the process's client input.

    Raises:
      ValueError: `process` takes no client controls, or `client_ids` are not the N clients it
        was built for (`num_clients`: its server control divides by N).
    """
    layout = scaffold.control_layout(process)
    if layout is None:
      raise _checks.ArgumentError(argument='process', value=process, message=(
          'process takes no client controls (its clients take datasets); '
          'ClientControls is for processes built by build_scaffold'))
    store = cls(client_ids, layout[0], layout[1])
    built_for = scaffold.num_clients_of(process)
    if built_for is not None and built_for != store.num_clients:
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          f'client_ids name {store.num_clients} clients but process was built with '
          f'num_clients={built_for} (its server control divides by N): give the ids of its '
          f'{built_for} clients, or build the process with num_clients={store.num_clients}'))
    return store

  @property
  def client_ids(self) -> list[Any]:
    return list(self._ids)

  @property
  def num_clients(self) -> int:
    """N."""
    return len(self._ids)

  @property
  def size(self) -> int:
    """d."""
    return self._controls.shape[1]

  @property
  def version(self) -> int:
    """The `version` given to the last `update` (or restored); 0 at the start."""
    return self._version

  def control(self, client_id: Any) -> np.ndarray:
    """A copy of client `client_id`'s control."""
    return self._controls[self._row(client_id, 'client_id')].copy()

  def has_participated(self, client_id: Any) -> bool:
    """Whether `client_id` has taken part in a round."""
    return bool(self._participated[self._row(client_id, 'client_id')])

  def _row(self, client_id: Any, name: str) -> int:
    try:
      return self._index[client_id]
    except (KeyError, TypeError):
      raise _checks.ArgumentError(argument=name, value=client_id, message=(
          f'{name}: {client_id!r} is not one of the {len(self._ids)} clients of '
          'this federation')) from None

  def _rows(self, client_ids: Sequence[Any]) -> np.ndarray:
    if isinstance(client_ids, (str, bytes)):
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          f'client_ids must be a list of client ids, got {client_ids!r}'))
    rows = [self._row(cid, 'client_ids') for cid in client_ids]
    if len(set(rows)) != len(rows):
      seen = set()
      twice = next(cid for cid, r in zip(client_ids, rows) if r in seen or seen.add(r))
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          f'client_ids must be distinct within a round, got {twice!r} twice'))
    return np.asarray(rows, np.int64)

  def for_cohort(self, client_ids: Sequence[Any], datasets: Sequence[Any]
                 ) -> list[collections.OrderedDict]:
    """The clients' inputs of a round: `OrderedDict(data=dataset, control=c_i, slot=k)` for the
    k-th client of `client_ids` with its dataset `datasets[k]`. The cohort is remembered: the
    round's `update` keeps the new controls of these clients, slot k for `client_ids[k]`."""
    rows = self._rows(client_ids)
    if len(datasets) != len(rows):
      raise _checks.ArgumentError(argument='datasets', value=datasets, message=(
          f'datasets must hold one dataset per client: {len(rows)} client_ids, '
          f'{len(datasets)} datasets'))
    self._cohort = (list(client_ids), rows)
    return [collections.OrderedDict([(scaffold.DATA, data),
                                     (scaffold.CONTROL, self._controls[r].copy()),
                                     (scaffold.SLOT, np.int32(k))])
            for k, (r, data) in enumerate(zip(rows, datasets))]

  def update(self, client_ids: Sequence[Any], output: Any, version: Optional[int] = None) -> Any:
    """Keeps the new controls of a round's `output` (`process.next(state, for_cohort(client_ids,
    ...))`) and returns `output.metrics` without them.

    The controls go to the clients of the last `for_cohort` (slot k to its k-th client);
    `client_ids` must be that cohort, in the same order, else nothing changes and a ValueError
    names them (given in another order, clients would get each other's controls). A client
    missing from the output (its control was not finite) keeps its control. `version` (default:
    the current one + 1) labels the result, see `arrays`.

    Raises:
      ValueError: no `for_cohort` since the last `update` (or `restore`), `client_ids` not its
        cohort, or an `output` that is not such a round's; the store is unchanged.
    """
    if self._cohort is None:
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          'update keeps the controls of the cohort of the last for_cohort, and there is none '
          'since the last update or restore: call for_cohort(client_ids, datasets) to build '
          'the round\'s input first'))
    cohort, rows = self._cohort
    if not np.array_equal(self._rows(client_ids), rows):
      raise _checks.ArgumentError(argument='client_ids', value=client_ids, message=(
          f'client_ids {list(client_ids)!r} are not the cohort {cohort!r} given to for_cohort '
          'for this round, in that order (slot k of the output is its k-th client)'))
    metrics = output.metrics
    try:
      sent = metrics[scaffold.CLIENT_CONTROLS]
    except (KeyError, TypeError):
      raise _checks.ArgumentError(argument='output', value=output, message=(
          f'output.metrics holds no {scaffold.CLIENT_CONTROLS!r}: output must be '
          'a round of a process built by build_scaffold')) from None
    slots = np.asarray(sent['slot']).reshape(-1).astype(np.int64)
    new = np.asarray(sent['control'])
    if new.ndim != 2 or new.shape != (len(slots), self.size):
      raise _checks.ArgumentError(argument='output', value=output, message=(
          f'output.metrics[{scaffold.CLIENT_CONTROLS!r}] holds controls of shape '
          f'{new.shape}, expected ({len(slots)}, {self.size})'))
    if len(slots) and (slots.min() < 0 or slots.max() >= len(rows)
                       or len(set(slots.tolist())) != len(slots)):
      raise _checks.ArgumentError(argument='output', value=output, message=(
          f'the output\'s slots {slots.tolist()} do not match the {len(rows)} '
          'client_ids of the round: output must be the round whose input the last '
          'for_cohort built'))
    if not np.all(np.isfinite(new)):
      raise _checks.ArgumentError(argument='output', value=output, message=(
          'the output holds non-finite client controls; they are not kept'))
    changed = rows[slots]
    version = self._version + 1 if version is None else int(version)
    # Undo record first, version next, rows last: an interruption anywhere leaves `arrays`
    # able to give the state of either version (see `arrays`).
    self._undo = _Undo(self._version, changed, self._controls[changed].copy(),
                       self._participated[changed].copy())
    self._version = version
    self._controls[changed] = new
    self._participated[changed] = True
    self._cohort = None
    rest = collections.OrderedDict((k, v) for k, v in metrics.items()
                                   if k != scaffold.CLIENT_CONTROLS)
    return rest

  def arrays(self, version: Optional[int] = None) -> collections.OrderedDict:
    """The store as arrays, `OrderedDict(controls=[N, d], participated=bool [N], version=int64)`
    (views; copy before changing them).

    Args:
      version: the version wanted: the current one (default), or the one before the last
        `update` (its rows are restored first): a training loop interrupted between `update` and
        its record of the round saves the state it recorded.

    Raises:
      ValueError: another version.
    """
    if version is not None and int(version) != self._version:
      undo = self._undo
      if undo is None or int(version) != undo.version:
        raise _checks.ArgumentError(argument='version', value=version, message=(
            f'version {version} is not held: the controls are at version '
            f'{self._version}'))
      self._controls[undo.rows] = undo.controls
      self._participated[undo.rows] = undo.participated
      self._version = undo.version
      self._undo = None
    return collections.OrderedDict(controls=self._controls, participated=self._participated,
                                   version=np.int64(self._version))

  def restore(self, arrays: Any) -> None:
    """Replaces the store by `arrays` (as `arrays()` gives them, e.g. from a checkpoint).

    Raises:
      ValueError: arrays of another shape or dtype, or non-finite controls; the store is
        unchanged.
    """
    try:
      controls, participated, version = (arrays[k] for k in _FIELDS)
    except (KeyError, TypeError):
      raise _checks.ArgumentError(argument='arrays', value=arrays, message=(
          f'arrays must be a mapping with keys {_FIELDS}, got {arrays!r}')) from None
    controls, participated = np.asarray(controls), np.asarray(participated)
    if controls.shape != self._controls.shape or controls.dtype != self._controls.dtype:
      raise _checks.ArgumentError(argument='arrays', value=arrays, message=(
          f'controls of shape {controls.shape} and dtype {controls.dtype} cannot '
          f'be restored into a store of shape {self._controls.shape} and dtype '
          f'{self._controls.dtype}'))
    if participated.shape != self._participated.shape:
      raise _checks.ArgumentError(argument='arrays', value=arrays, message=(
          f'participated of shape {participated.shape}, expected '
          f'{self._participated.shape}'))
    if not np.all(np.isfinite(controls)):
      raise _checks.ArgumentError(argument='arrays', value=arrays, message=(
          'the controls to restore are not all finite'))
    self._controls = np.array(controls, copy=True)
    self._participated = np.array(participated, bool, copy=True)
    self._version = int(np.asarray(version))
    self._undo = None
    self._cohort = None

  def save(self, path: str) -> None:
    """Writes the store to `path` (an `.npz` file)."""
    with open(path, 'wb') as f:
      np.savez(f, **self.arrays())

  def load(self, path: str) -> None:
    """Restores the store from a file written by `save`."""
    with np.load(path, allow_pickle=False) as data:
      self.restore({k: data[k] for k in _FIELDS})
