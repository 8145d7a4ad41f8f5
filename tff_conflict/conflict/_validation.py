"""Tensor argument checks shared by the kernels: structural checks always (an `ArgumentError`, or a
`tf.debugging` assertion for what only a running graph knows), value checks only with
`validate=True` (docs/methods.md, "Conventions")."""

import numbers

import numpy as np
import tensorflow as tf

from tff_conflict._checks import ArgumentError

FLOAT_DTYPES = (tf.float32, tf.float64)


def _is_eager():
  return tf.executing_eagerly()


def stack(value, name):
  """Converts `value` to a float32/float64 tensor of shape [K, d] with d > 0.

  Returns:
    (tensor, assertions): the assertions (graph mode, unknown rank or d) must run before use.
  """
  try:
    t = tf.convert_to_tensor(value)
  except (TypeError, ValueError) as e:
    raise ArgumentError(argument=name, value=value, message=(
        f'{name} must be a float tensor of shape [K, d], got {type(value).__name__} '
        f'that does not convert to a tensor ({e})')) from None
  if t.dtype not in FLOAT_DTYPES:
    raise ArgumentError(argument=name, value=value, message=(
        f'{name} must have dtype float32 or float64, got {t.dtype.name}'))
  checks = []
  rank = t.shape.rank
  if rank is not None and rank != 2:
    raise ArgumentError(argument=name, value=value, message=(
        f'{name} must have rank 2 (shape [K, d]), got shape {t.shape.as_list()}'))
  if rank is None:
    checks.append(tf.debugging.assert_rank(
        t, 2, message=f'{name} must have rank 2 (shape [K, d])'))
  d = t.shape[1] if rank == 2 else None
  if d == 0:
    raise ArgumentError(argument=name, value=value, message=(
        f'{name} must have at least one column (d > 0), got shape '
        f'{t.shape.as_list()}'))
  if d is None:
    checks.append(tf.debugging.assert_greater(
        tf.shape(t)[-1], 0, message=f'{name} must have at least one column (d > 0)'))
  return t, checks


def same_shape(a, a_name, b, b_name):
  """Both [K, d] stacks have the same shape (static ValueError or graph assertion)."""
  sa, sb = a.shape, b.shape
  if sa.rank == 2 and sb.rank == 2:
    for axis, what in ((0, 'clients K'), (1, 'columns d')):
      if sa[axis] is not None and sb[axis] is not None and sa[axis] != sb[axis]:
        raise ArgumentError(argument=b_name, value=b, message=(
            f'{a_name} and {b_name} must have the same number of {what}, got '
            f'shapes {sa.as_list()} and {sb.as_list()}'))
  if sa.is_fully_defined() and sb.is_fully_defined():
    return []
  return [tf.debugging.assert_equal(
      tf.shape(a), tf.shape(b),
      message=f'{a_name} and {b_name} must have the same shape [K, d]')]


def vector(value, name, stack_tensor, stack_name, *, kind='real'):
  """Converts `value` to a rank-1 tensor of length K (the number of rows of `stack_tensor`).

  kind: 'real' (any real dtype, returned as float64) or 'bool'.
  Returns (tensor, assertions).
  """
  try:
    t = tf.convert_to_tensor(value)
  except (TypeError, ValueError) as e:
    raise ArgumentError(argument=name, value=value, message=(
        f'{name} must be a tensor of shape [K], got {type(value).__name__} '
        f'that does not convert to a tensor ({e})')) from None
  if kind == 'bool':
    if t.dtype != tf.bool:
      raise ArgumentError(argument=name, value=value, message=(
          f'{name} must have dtype bool, got {t.dtype.name}'))
  else:
    if not (t.dtype.is_floating or t.dtype.is_integer):
      raise ArgumentError(argument=name, value=value, message=(
          f'{name} must have a real dtype, got {t.dtype.name}'))
    t = tf.cast(t, tf.float64)
  checks = []
  rank = t.shape.rank
  if rank is not None and rank != 1:
    raise ArgumentError(argument=name, value=value, message=(
        f'{name} must have rank 1 (shape [K]), got shape {t.shape.as_list()}'))
  if rank is None:
    checks.append(tf.debugging.assert_rank(t, 1, message=f'{name} must have rank 1 (shape [K])'))
  k_vec = t.shape[0] if rank == 1 else None
  k_stack = stack_tensor.shape[0] if stack_tensor.shape.rank == 2 else None
  if k_vec is not None and k_stack is not None:
    if k_vec != k_stack:
      raise ArgumentError(argument=name, value=value, message=(
          f'{name} must have one entry per client: {stack_name} has K = {k_stack} '
          f'rows, {name} has shape {t.shape.as_list()}'))
  else:
    checks.append(tf.debugging.assert_equal(
        tf.shape(t)[0], tf.shape(stack_tensor)[0],
        message=f'{name} must have one entry per client (as many as {stack_name} has rows)'))
  return t, checks


def include_mask(include, stack_tensor, stack_name):
  """The `include` argument as a bool [K] tensor (all True when None)."""
  if include is None:
    return tf.ones(tf.shape(stack_tensor)[:1], tf.bool), []
  return vector(include, 'include', stack_tensor, stack_name, kind='bool')


def values(weights, include, num_rows, *, validate, stack_name):
  """Value checks (validate=True only): at least one client, non-negative finite weights whose
  sum over included clients is positive, `include` not all False.

  `weights` may be None (kernels without weights). Returns graph assertions (empty eagerly:
  eager violations raise ArgumentError right here).
  """
  if not validate:
    return []
  if _is_eager():
    k = int(num_rows)
    if k == 0:
      raise ArgumentError(argument=stack_name, value=k, message=(
          f'{stack_name} has no clients (K = 0); pass validate=False to get an '
          'all-zero aggregate for an empty round'))
    inc = include.numpy()
    if not inc.any():
      raise ArgumentError(argument='include', value=inc, message=(
          f'include excludes every client, got include={inc.tolist()}'))
    if weights is not None:
      w = weights.numpy()
      bad = np.flatnonzero(~np.isfinite(w))
      if bad.size:
        raise ArgumentError(argument='weights', value=w, message=(
            f'weights must be finite, got weights[{bad[0]}] = {w[bad[0]]!r}'))
      neg = np.flatnonzero(w < 0)
      if neg.size:
        raise ArgumentError(argument='weights', value=w, message=(
            f'weights must be non-negative, got weights[{neg[0]}] = {w[neg[0]]!r}'))
      if not np.sum(w[inc]) > 0:
        raise ArgumentError(argument='weights', value=w, message=(
            'weights must not all be zero (over the included clients), got '
            f'weights={np.asarray(w).tolist()[:20]}'
            f'{" ..." if w.size > 20 else ""}'))
    return []
  checks = [
      tf.debugging.assert_positive(num_rows, message=(
          f'{stack_name} has no clients (K = 0); use validate=False for an empty round')),
      tf.debugging.Assert(tf.reduce_any(include), ['include excludes every client'])]
  if weights is not None:
    checks += [
        tf.debugging.Assert(tf.reduce_all(tf.math.is_finite(weights)),
                            ['weights must be finite, got weights =', weights], summarize=20),
        tf.debugging.assert_non_negative(weights, message='weights must be non-negative',
                                         summarize=20),
        tf.debugging.Assert(
            tf.reduce_sum(tf.where(include, weights, tf.zeros_like(weights))) > 0,
            ['weights must not all be zero (over the included clients), got weights =', weights],
            summarize=20)]
  return checks


def seed_pair(seed):
  """The FedGH order seed as an int64 [2] tensor for stateless random ops.

  None: a fresh random seed (not reproducible); a Python int s: [s, 0]; an integer tensor of
  shape [] (s -> [s, 0]) or [2] (used as is).
  """
  if seed is None:
    return tf.random.uniform([2], minval=0, maxval=np.iinfo(np.int64).max, dtype=tf.int64)
  if isinstance(seed, (bool, np.bool_)):
    raise ArgumentError(argument='seed', value=seed, message=(
        f'seed must be None, an int or an integer tensor of shape [] or [2], '
        f'got {seed!r}'))
  if isinstance(seed, numbers.Integral):
    s = int(seed)
    if not -2**63 <= s < 2**63:
      raise ArgumentError(argument='seed', value=seed, message=(
          f'seed must fit in int64, got {seed!r}'))
    return tf.constant([s, 0], tf.int64)
  try:
    t = tf.convert_to_tensor(seed)
  except (TypeError, ValueError):
    raise ArgumentError(argument='seed', value=seed, message=(
        f'seed must be None, an int or an integer tensor of shape [] or [2], '
        f'got {seed!r}')) from None
  if not t.dtype.is_integer or t.shape.rank is None or t.shape.as_list() not in ([], [2]):
    raise ArgumentError(argument='seed', value=seed, message=(
        'seed must be None, an int or an integer tensor of shape [] or [2], got '
        f'dtype {t.dtype.name} and shape {t.shape}'))
  t = tf.cast(t, tf.int64)
  if t.shape.rank == 0:
    t = tf.stack([t, tf.constant(0, tf.int64)])
  return t
