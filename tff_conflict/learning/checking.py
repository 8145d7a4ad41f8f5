"""`check_arguments(build, ...)`: runs a process builder's argument checks without building the
process (no TFF tracing), so that a plan of many runs can refuse a bad one before any starts;
with `ANY_MODEL`, the checks of every argument but the model, before any model or data exist."""

import contextvars
from typing import Any, Callable

_CHECKING = contextvars.ContextVar('tff_conflict_checking_only', default=False)


class _Checked(BaseException):
  """Raised where a builder, its checks passed, would start composing its process (a
  BaseException: no builder's error handling takes it for its own)."""


class _AnyModel:
  """`check_arguments`' stand-in for a model not known yet."""

  def __repr__(self):
    return 'ANY_MODEL'


ANY_MODEL = _AnyModel()


def stop_if_checking() -> None:
  """Called by a builder once every argument is checked, just before it composes: ends a
  `check_arguments` call there."""
  if _CHECKING.get():
    raise _Checked()


def stop_at_model(model_fn: Any) -> None:
  """Called by `models.resolve_model` before it looks at `model_fn`: ends a `check_arguments`
  call given `ANY_MODEL` there."""
  if model_fn is ANY_MODEL and _CHECKING.get():
    raise _Checked()


def check_arguments(build: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
  """Calls `build(*args, **kwargs)` up to the point where its arguments are checked, and returns.

  The library's builders (`build_process`, the `build_*` of `ALGORITHMS`, `build_scaffold`) run
  every check they make (hyperparameter ranges, incompatible parts, the optimizers, the model
  called in a throwaway graph) and then stop before composing the TFF process: this takes a
  fraction of a second where building takes seconds. Given `ANY_MODEL` as the model (and no
  `input_spec`), a builder stops where it first looks at the model: every argument it checks
  before is checked (each builder checks its own arguments first; FedDecorr checks its model
  before the aggregator it hands on). A builder of your own that never reaches a library
  builder is called whole.

  Raises:
    ValueError: the builder's error for the first bad argument (an `ArgumentError` naming it).
  """
  token = _CHECKING.set(True)
  try:
    build(*args, **kwargs)
  except _Checked:
    pass
  finally:
    _CHECKING.reset(token)
