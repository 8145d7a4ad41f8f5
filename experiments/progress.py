"""Progress counted in rounds, over one run or a grid of runs: done/total, elapsed time, ETA (a
`tqdm` bar on a terminal, plain lines otherwise).
"""

import sys
import time
from typing import Optional, TextIO

import tqdm


def format_duration(seconds: Optional[float]) -> str:
  """`h:mm:ss` or `m:ss`; `?` for None."""
  if seconds is None:
    return '?'
  seconds = int(round(max(0.0, seconds)))
  hours, rest = divmod(seconds, 3600)
  minutes, secs = divmod(rest, 60)
  return f'{hours}:{minutes:02d}:{secs:02d}' if hours else f'{minutes}:{secs:02d}'


class Progress:
  """Rounds `done + 1 .. total`, ticked one at a time.

  A training run ticks each round with its latest figures (`tick(postfix=...)`); a grid of runs
  announces each run (`start_run(rounds, label)`), ticks its rounds and ends it (`end_run()`, which
  drops the rounds it did not run from the total). On a terminal it is a `tqdm` bar redrawn in
  place; otherwise (a pipe, a log file, CI) plain lines. The ETA is the mean time of the rounds
  ticked by this `Progress` times the rounds left.

  Args:
    total: the rounds planned (the last round of a run).
    done: rounds already done (a resumed run starts after them); not counted in the ETA.
    label: printed before every line (e.g. the algorithm).
    stream: where to write; stdout by default.
    enabled: False shows nothing.
    min_interval: seconds between plain lines (0: one per tick).
    width: characters of the bar on a terminal.
    clock: returns seconds (tests pass a fake clock).
  """

  def __init__(self, total: int, *, done: int = 0, label: str = '',
               stream: Optional[TextIO] = None, enabled: bool = True, min_interval: float = 0.0,
               width: int = 24, clock=time.monotonic):
    if not isinstance(total, int) or total < 0:
      raise ValueError(f'total must be an integer >= 0, got {total!r}')
    if not isinstance(done, int) or not 0 <= done <= total:
      raise ValueError(f'done must be an integer in [0, {total}], got {done!r}')
    self._total, self._done, self._first = total, done, done
    self._label = f'{label} ' if label else ''
    self._stream = stream if stream is not None else sys.stdout
    self._enabled = enabled
    self._min_interval = min_interval
    self._clock = clock
    self._start = clock()
    self._last_line: Optional[float] = None
    self._shown = done  # the round count of the last plain line
    self._postfix = ''
    self._run_rounds = self._run_ticks = 0
    isatty = getattr(self._stream, 'isatty', None)
    self._bar: Optional[tqdm.tqdm] = None
    if enabled and isatty and isatty():
      self._bar = tqdm.tqdm(
          total=total, initial=done, file=self._stream, desc=self._label or None, smoothing=0,
          mininterval=0, leave=True, dynamic_ncols=True,
          bar_format=('{desc}[{bar:%d}] round {n_fmt}/{total_fmt}  elapsed {elapsed}  '
                      'ETA {remaining}{postfix}') % width)

  @property
  def is_tty(self) -> bool:
    return self._bar is not None

  @property
  def total(self) -> int:
    return self._total

  @property
  def done(self) -> int:
    return self._done

  def eta(self) -> Optional[float]:
    """Seconds left at the mean time of the rounds ticked so far (None before the first)."""
    ticked = self._done - self._first
    if ticked <= 0:
      return None
    return (self._clock() - self._start) / ticked * max(0, self._total - self._done)

  def line(self) -> str:
    """The plain line of the current state."""
    text = (f'{self._label}round {self._done:>{len(str(self._total))}d}/{self._total}  '
            f'elapsed {format_duration(self._clock() - self._start)}  '
            f'ETA {format_duration(self.eta())}')
    return f'{text}  {self._postfix}' if self._postfix else text

  def _show(self, force: bool = False) -> None:
    if not self._enabled:
      return
    if self._bar is not None:
      self._bar.set_postfix_str(self._postfix, refresh=False)
      self._bar.total = self._total
      self._bar.update(self._done - self._bar.n)
      self._bar.refresh()
      return
    now = self._clock()
    if force or self._last_line is None or now - self._last_line >= self._min_interval:
      self._stream.write(self.line() + '\n')
      self._stream.flush()
      self._last_line, self._shown = now, self._done

  def tick(self, *, postfix: Optional[str] = None) -> None:
    """One round finished; `postfix` (if given) replaces the figures shown after the times."""
    self._done = min(self._total, self._done + 1)
    self._run_ticks += 1
    if postfix is not None:
      self._postfix = postfix
    self._show()

  def start_run(self, rounds: int, label: str = '') -> None:
    """A run of `rounds` planned rounds starts; `label` is shown after the times."""
    self._run_rounds, self._run_ticks, self._postfix = int(rounds), 0, label

  def end_run(self) -> None:
    """The run ended: the rounds it planned but did not run (finished already, failed) leave
    the total."""
    self.skip(max(0, self._run_rounds - self._run_ticks))
    self._run_rounds = self._run_ticks = 0

  def skip(self, rounds: int) -> None:
    """Drops `rounds` planned rounds that will not run."""
    if rounds > 0:
      self._total = max(self._done, self._total - int(rounds))
      if self._bar is not None:
        self._show()

  def close(self) -> None:
    """Ends the bar's line on a terminal; otherwise prints the last state unless it is shown."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
    elif self._done != self._shown:
      self._show(force=True)
