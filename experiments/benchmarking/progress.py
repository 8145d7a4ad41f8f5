"""Progress over a whole benchmark grid, counted in rounds, with elapsed time and ETA.

On a terminal it is a tqdm bar; otherwise (a log file, CI) one plain line at most every
`min_interval` seconds and after each run, so logs stay readable. The total shrinks when a run
turns out to be finished already (skipped) or fails, so the ETA extrapolates only from rounds
actually run.
"""

import sys
import time
from typing import Optional, TextIO

from experiments import progress as progress_lib


class GridProgress:
  """Counts rounds over the grid.

  Args:
    total: rounds planned (an upper bound: `start_run`/`end_run` reconcile it).
    enabled: False shows nothing.
    stream: where to write (default stderr).
    min_interval: seconds between plain lines when the stream is not a terminal.
    clock: returns seconds (tests pass a fake clock).
  """

  def __init__(self, total: int, *, enabled: bool = True, stream: Optional[TextIO] = None,
               min_interval: float = 30.0, clock=time.monotonic):
    self._total = max(0, int(total))
    self._done = 0
    self._stream = stream if stream is not None else sys.stderr
    self._enabled = enabled
    self._min_interval = min_interval
    self._clock = clock
    self._start = clock()
    self._last_line = None
    self._run_rounds = 0
    self._run_ticks = 0
    self._label = ''
    isatty = getattr(self._stream, 'isatty', None)
    self._bar = None
    if enabled and isatty and isatty():
      import tqdm  # pylint: disable=g-import-not-at-top
      self._bar = tqdm.tqdm(total=self._total, unit='round', file=self._stream,
                            dynamic_ncols=True, smoothing=0.05)

  @property
  def total(self) -> int:
    return self._total

  @property
  def done(self) -> int:
    return self._done

  def eta(self) -> Optional[float]:
    """Seconds left at the mean rate of the rounds run so far (None before the first)."""
    if self._done <= 0:
      return None
    return (self._clock() - self._start) / self._done * max(0, self._total - self._done)

  def line(self) -> str:
    percent = 100.0 * self._done / self._total if self._total else 100.0
    elapsed = progress_lib.format_duration(self._clock() - self._start)
    return (f'[benchmark] {self._done}/{self._total} rounds ({percent:.0f}%)  elapsed {elapsed}'
            f'  ETA {progress_lib.format_duration(self.eta())}  {self._label}')

  def _plain(self, force: bool = False) -> None:
    if not self._enabled or self._bar is not None:
      return
    now = self._clock()
    if force or self._last_line is None or now - self._last_line >= self._min_interval:
      self._stream.write(self.line() + '\n')
      self._stream.flush()
      self._last_line = now

  def start_run(self, rounds: int, label: str = '') -> None:
    """A run of `rounds` rounds (counted in the total) starts."""
    self._run_rounds, self._run_ticks, self._label = int(rounds), 0, label
    if self._bar is not None:
      self._bar.set_description_str(label, refresh=False)

  def tick(self) -> None:
    """One round finished."""
    self._done += 1
    self._run_ticks += 1
    if self._bar is not None:
      self._bar.update(1)
    else:
      self._plain()

  def end_run(self) -> None:
    """The run ended: rounds it planned but did not run (skipped, failed) leave the total."""
    self.skip(max(0, self._run_rounds - self._run_ticks))
    self._run_rounds = self._run_ticks = 0
    self._plain(force=False)

  def skip(self, rounds: int) -> None:
    """Removes `rounds` planned rounds that will not run."""
    if rounds <= 0:
      return
    self._total = max(self._done, self._total - int(rounds))
    if self._bar is not None:
      self._bar.total = self._total
      self._bar.refresh()

  def close(self) -> None:
    if self._bar is not None:
      self._bar.close()
      self._bar = None
    elif self._enabled and self._done:
      self._plain(force=True)
