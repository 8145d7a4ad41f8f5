"""The library's errors a user fixes: `ArgumentError` (a bad argument, named with its value) and
`Failure` (anything else, e.g. a run's outputs); the checks of Python scalars: each returns the
value normalized or raises `ArgumentError` (booleans are never numbers)."""

import math
import numbers
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np

INT64_MIN = -2**63
INT64_MAX = 2**63 - 1


class ArgumentError(ValueError):
  """A bad argument value, raised before any work starts; its message names both.

  Attributes:
    argument: the argument's name (a flag's in the experiment binaries), or None.
    value: the value refused.
    requirement: what `value` must be, in words ('a finite number > 0'), or None when the message
      gives a reason instead.
  """
  # TF's AutoGraph re-raises an error from converted code as it is (a StagingError otherwise).
  ag_pass_through = True

  def __init__(self, message: str, *, argument: Optional[str] = None, value: Any = None,
               requirement: Optional[str] = None):
    super().__init__(message)
    self.argument, self.value, self.requirement = argument, value, requirement

  @classmethod
  def must_be(cls, argument: str, value: Any, requirement: str) -> 'ArgumentError':
    """The error '<argument> must be <requirement>, got <value!r>'."""
    return cls(f'{argument} must be {requirement}, got {value!r}', argument=argument, value=value,
               requirement=requirement)


class ArgumentTypeError(ArgumentError, TypeError):
  """An `ArgumentError` whose value has the wrong type (also a `TypeError`)."""


class Failure(Exception):
  """A user-fixable error that is not an argument's value (a binary prints it, exit status 1)."""


def one_of(choices: Sequence[Any]) -> str:
  """The requirement "one of 'a', 'b'" (each choice by its repr)."""
  return 'one of ' + ', '.join(map(repr, choices))


def _is_real(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def is_int(value: Any) -> bool:
  """An integer (Python or NumPy); booleans are not."""
  return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_finite_number(value: Any) -> bool:
  """A finite real number (Python or NumPy); booleans are not."""
  return _is_real(value) and math.isfinite(value)


def check_finite(name: str, value: Any) -> float:
  """A finite real number."""
  if not is_finite_number(value):
    raise ArgumentError.must_be(name, value, 'a finite number')
  return float(value)


def check_nonnegative(name: str, value: Any) -> float:
  """A finite real number >= 0."""
  if not is_finite_number(value) or value < 0:
    raise ArgumentError.must_be(name, value, 'a finite number >= 0')
  return float(value)


def check_positive(name: str, value: Any) -> float:
  """A finite real number > 0."""
  if not is_finite_number(value) or value <= 0:
    raise ArgumentError.must_be(name, value, 'a finite number > 0')
  return float(value)


def check_ratio(name: str, value: Any) -> float:
  """A real number in (0, 1] (a fraction of the clients that must select at least one)."""
  if not _is_real(value) or not 0.0 < value <= 1.0:  # NaN fails the comparison.
    raise ArgumentError.must_be(name, value, 'a number in (0, 1]')
  return float(value)


def check_fraction(name: str, value: Any) -> float:
  """A real number in (0, 1) (a share that leaves some on either side)."""
  if not _is_real(value) or not 0.0 < value < 1.0:
    raise ArgumentError.must_be(name, value, 'a number in (0, 1)')
  return float(value)


def check_unit_interval(name: str, value: Any) -> float:
  """A real number in [0, 1]."""
  if not _is_real(value) or not 0.0 <= value <= 1.0:
    raise ArgumentError.must_be(name, value, 'a number in [0, 1]')
  return float(value)


def check_optional_positive(name: str, value: Any) -> Optional[float]:
  """None, or a finite real number > 0."""
  if value is None:
    return None
  if not is_finite_number(value) or value <= 0:
    raise ArgumentError.must_be(name, value, 'None or a finite number > 0')
  return float(value)


def check_int(name: str, value: Any, *, minimum: Optional[int] = None) -> int:
  """An integer, >= `minimum` when one is given."""
  if not is_int(value) or (minimum is not None and value < minimum):
    bound = '' if minimum is None else f' >= {minimum}'
    raise ArgumentError.must_be(name, value, f'an integer{bound}')
  return int(value)


def check_optional_int(name: str, value: Any, *, minimum: Optional[int] = None) -> Optional[int]:
  """None, or an integer >= `minimum` when one is given."""
  if value is None:
    return None
  if not is_int(value) or (minimum is not None and value < minimum):
    bound = '' if minimum is None else f' >= {minimum}'
    raise ArgumentError.must_be(name, value, f'None or an integer{bound}')
  return int(value)


def check_seed(name: str, value: Any) -> Optional[int]:
  """None (draw one at random) or an integer that fits in int64 (a TensorFlow seed)."""
  if value is not None and (not is_int(value) or not INT64_MIN <= value <= INT64_MAX):
    raise ArgumentError.must_be(name, value, 'None or an integer in [-2**63, 2**63)')
  return None if value is None else int(value)


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
  """One of the strings `choices`."""
  if not isinstance(value, str) or value not in choices:
    raise ArgumentError.must_be(name, value, one_of(choices))
  return value


def check_bool(name: str, value: Any) -> bool:
  """A bool (Python or NumPy); 0 and 1 are refused."""
  if not isinstance(value, (bool, np.bool_)):
    raise ArgumentError.must_be(name, value, 'a bool')
  return bool(value)
