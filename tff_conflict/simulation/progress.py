"""Progress in rounds over a run, or runs over a grid: done/total, elapsed time, ETA (a `tqdm` bar
on a terminal, plain lines otherwise)."""

import sys
import time
from typing import Optional, TextIO

import tqdm


def format_duration(seconds: Optional[float]) -> str:
  """`h:mm:ss` or `m:ss`; `?` for None."""
  if seconds is None:
    return '?'
  minutes, secs = divmod(int(round(max(0.0, seconds))), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours}:{minutes:02d}:{secs:02d}' if hours else f'{minutes}:{secs:02d}'


class Progress:
  """`unit`s `done + 1 .. total` ticked one at a time, `label` first and `postfix` after the times;
  ETA: the mean time per tick here times those left (`total` may change). A terminal `stream`
  (default stdout) gets a `tqdm` bar `width` wide, anything else plain lines, at most one per
  `min_interval` seconds of `clock`; `enabled=False` shows nothing."""

  def __init__(self, total: int, *, done: int = 0, label: str = '',
               stream: Optional[TextIO] = None, enabled: bool = True, min_interval: float = 0.0,
               width: int = 24, clock=time.monotonic, unit: str = 'round'):
    if not isinstance(total, int) or total < 0:
      raise ValueError(f'total must be an integer >= 0, got {total!r}')
    if not isinstance(done, int) or not 0 <= done <= total:
      raise ValueError(f'done must be an integer in [0, {total}], got {done!r}')
    self.total, self.done, self._first, self._shown = total, done, done, done
    self._label, self._unit = f'{label} ' if label else '', unit
    self._stream = stream if stream is not None else sys.stdout
    self._enabled, self._min_interval, self._clock = enabled, min_interval, clock
    self._start, self._last_line, self._postfix, self._bar = clock(), None, '', None
    if enabled and getattr(self._stream, 'isatty', lambda: False)():
      self._bar = tqdm.tqdm(
          total=total, initial=done, file=self._stream, desc=self._label or None, smoothing=0,
          mininterval=0, leave=True, dynamic_ncols=True,
          bar_format=f'{{desc}}[{{bar:{width}}}] {unit} {{n_fmt}}/{{total_fmt}}  elapsed '
                     '{elapsed}  ETA {remaining}{postfix}')

  def eta(self) -> Optional[float]:
    """Seconds left at the mean time per tick so far (None before the first)."""
    ticked = self.done - self._first
    return ((self._clock() - self._start) / ticked * max(0, self.total - self.done)
            if ticked > 0 else None)

  def _show(self, force: bool = False) -> None:
    if not self._enabled:
      return
    if self._bar is not None:
      self._bar.set_postfix_str(self._postfix, refresh=False)
      self._bar.total = self.total
      self._bar.update(self.done - self._bar.n)
      self._bar.refresh()
      return
    now = self._clock()
    if force or self._last_line is None or now - self._last_line >= self._min_interval:
      line = (f'{self._label}{self._unit} {self.done:>{len(str(self.total))}d}/{self.total}  '
              f'elapsed {format_duration(now - self._start)}  ETA {format_duration(self.eta())}')
      self._stream.write(f'{line}  {self._postfix}\n' if self._postfix else f'{line}\n')
      self._stream.flush()
      self._last_line, self._shown = now, self.done

  def tick(self, *, postfix: Optional[str] = None, skipped: bool = False) -> None:
    """One more done; `postfix` (if given) replaces the figures shown after the times. A
    `skipped` one (done before, found on disk) takes no time: the ETA's rate leaves it out."""
    self.done = min(self.total, self.done + 1)
    if skipped:
      self._first += 1
      if self._bar is not None:
        self._bar.initial += 1   # tqdm's rate: (n - initial) / elapsed
    if postfix is not None:
      self._postfix = postfix
    self._show()

  def close(self) -> None:
    """Ends the bar's line on a terminal; otherwise prints the last state unless shown (once)."""
    if self._bar is not None:
      self._bar.close()
      self._bar = None
    elif self.done != self._shown:
      self._show(force=True)
    self._shown = self.done
