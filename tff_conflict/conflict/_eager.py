"""Eager calls of the kernels: arguments checked eagerly, then one cached concrete function per
kernel, dtypes, ranks and hyperparameters (docs/design.md, "Kernels")."""

import collections
import threading

import tensorflow as tf

# Traced functions kept (least recently used dropped first): one per kernel, argument dtypes and
# hyperparameter values in use.
MAX_FUNCTIONS = 64

_lock = threading.Lock()
_functions = collections.OrderedDict()


def executing_eagerly() -> bool:
  return tf.executing_eagerly()


def _spec(tensor, exact):
  """The `tf.TensorSpec` of `tensor`: its shape if `exact`, else every dimension unknown."""
  shape = tensor.shape if exact else [None] * tensor.shape.rank
  return tf.TensorSpec(shape, tensor.dtype)


class _Bound:
  """`impl` with its tensors passed by position and everything else fixed.

  A callable object rather than a closure: TensorFlow's warning about frequent retracing counts
  traces per code object, and every cached function here is traced once.
  """

  def __init__(self, impl, names, nones, static):
    self._impl = impl
    self._names = names
    self._fixed = dict(dict.fromkeys(nones), **dict(static))

  def __call__(self, *args):
    return self._impl(**dict(zip(self._names, args)), **self._fixed)


def _function(key, impl, names, nones, static, tensors, exact):
  """The traced function for `key`, created (and traced) on first use."""
  with _lock:
    fn = _functions.get(key)
    if fn is not None:
      _functions.move_to_end(key)
      return fn
  specs = [_spec(tensors[n], n in exact) for n in names]
  fn = tf.function(_Bound(impl, names, nones, static), input_signature=specs,
                   autograph=False).get_concrete_function()
  with _lock:
    fn = _functions.setdefault(key, fn)
    _functions.move_to_end(key)
    while len(_functions) > MAX_FUNCTIONS:
      _functions.popitem(last=False)
  return fn


def call(impl, tensors, static=None, exact=()):
  """`impl(**tensors, **static)` run as a cached, traced function.

  Args:
    impl: the kernel's implementation (a module-level function: it is part of the cache key).
    tensors: name -> already converted and checked `tf.Tensor`, or None (passed as None).
    static: name -> hashable Python value (hyperparameters), fixed in the trace.
    exact: names of tensors whose shape is kept in the signature (e.g. a seed of shape [2]);
      every other tensor has all its dimensions unknown.
  """
  if tf.config.functions_run_eagerly():   # TensorFlow's debugging switch: op by op
    return impl(**tensors, **(static or {}))
  static = tuple(sorted((static or {}).items()))
  names = tuple(n for n, t in tensors.items() if t is not None)
  nones = tuple(n for n, t in tensors.items() if t is None)
  # The signature in cheap, hashable terms: dtype and rank (the whole shape for `exact` names).
  signature = tuple((tensors[n].dtype, tuple(tensors[n].shape) if n in exact
                     else tensors[n].shape.rank) for n in names)
  key = (impl, names, nones, signature, static)
  fn = _function(key, impl, names, nones, static, tensors, exact)
  return fn(*[tensors[n] for n in names])


def clear():
  """Drops every cached function (for tests)."""
  with _lock:
    _functions.clear()


def num_functions() -> int:
  with _lock:
    return len(_functions)
