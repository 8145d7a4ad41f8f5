"""Argument checks shared by the data loaders: each raises `ValueError` naming the argument."""

import math
import numbers


def check_int(name: str, value, *, minimum: int) -> int:
  """Returns `value` as an int; `ValueError` unless it is an integer >= `minimum` (bools rejected)."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
    raise ValueError(f'{name} must be an integer >= {minimum}, got {value!r}')
  return int(value)


def check_concentration(name: str, value) -> float:
  """Returns a Dirichlet concentration as a float; `ValueError` unless finite and > 0."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real)
      or not math.isfinite(value) or value <= 0):
    raise ValueError(f'{name} must be a finite number > 0, got {value!r}')
  return float(value)


def check_nonnegative(name: str, value) -> float:
  """Returns `value` as a float; `ValueError` unless finite and >= 0."""
  if (isinstance(value, bool) or not isinstance(value, numbers.Real)
      or not math.isfinite(value) or value < 0):
    raise ValueError(f'{name} must be a finite number >= 0, got {value!r}')
  return float(value)


def check_seed(value) -> int:
  """Returns a numpy seed; `ValueError` unless an integer >= 0."""
  return check_int('seed', value, minimum=0)
