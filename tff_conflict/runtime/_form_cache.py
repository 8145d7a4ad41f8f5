"""A cache of compiled `MapReduceForm`s: in this process, and on disk across processes.

TFF's MapReduceForm compiler (`tff.backends.mapreduce.get_map_reduce_form_for_computation`) is
pure Python and takes a large share of an in-process runner's start-up; its result depends only
on the computation it compiles, the compiler's options and the TensorFlow and TFF versions. So
`compile_map_reduce_form` keys each result by the SHA-256 of

    this cache's format version, TensorFlow's and TFF's versions, the compiler options
    (a serialized `ConfigProto`), and the computation's fingerprint (`_fingerprint`: its
    serialized `pb.Computation` with TensorFlow's process-dependent function names made
    canonical, so the same process built after different others has the same key)

and keeps it in memory (the last `MEMORY_ENTRIES` forms) and as one file per key in a
directory (`default_directory()`). A changed computation, option or version is another key: an
entry is never used for anything else than what produced it. The key, like a serialized type,
ignores Python containers: a form found (in memory or on disk) is typed with the asking
computation's own type signature.

File format (`<key>.mrf`): `MAGIC`, the key (64 hex digits) and a newline, the SHA-256 of the
payload (32 bytes), the payload: a serialized `pb.Computation` whose `type` is the form's type
signature and whose `struct` holds the form's ten TensorFlow computations under their field
names. An entry is used only if its magic, key and checksum match, it parses, and TFF's
`MapReduceForm` constructor accepts its computations (which checks their types against one
another); anything else (a truncated, corrupt or foreign file) is a miss: the form is compiled
again and the file rewritten. Files are written to a temporary name and renamed, so readers never
see a partial file, and processes may share a directory. Writing is best effort: a directory that
cannot be written only means no caching. After each write the directory keeps the
`DISK_ENTRIES` most recently used entries (a hit refreshes an entry's modification time).

Location: the environment variable `TFF_CONFLICT_COMPILE_CACHE` names the directory; set to
`off` (or `0`, `false`, `no`, or empty) it turns the disk cache off. Unset: `tff_conflict/mapreduce`
under `$XDG_CACHE_HOME`, or under `~/.cache`.
"""

import collections
import hashlib
import os
import tempfile
import threading
import time
from typing import Any, Callable

import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_federated.proto.v0 import computation_pb2 as pb
from tensorflow_federated.python.core.impl.computation import computation_impl
from tensorflow_federated.python.core.impl.context_stack import context_stack_impl
from tensorflow_federated.python.core.impl.types import type_serialization

from tff_conflict.runtime import _fingerprint

ENVIRONMENT_VARIABLE = 'TFF_CONFLICT_COMPILE_CACHE'
FORMAT_VERSION = 1
MAGIC = b'tff_conflict MapReduceForm cache\n'
SUFFIX = '.mrf'
MEMORY_ENTRIES = 16
DISK_ENTRIES = 256
_STALE_TEMPORARY_S = 3600.0
_OFF = frozenset({'', '0', 'off', 'false', 'no'})

FIELDS = ('prepare', 'work', 'zero', 'accumulate', 'merge', 'report', 'secure_sum_bitwidth',
          'secure_sum_max_input', 'secure_modular_sum_modulus', 'update')

_memory: 'collections.OrderedDict[str, Any]' = collections.OrderedDict()
_memory_lock = threading.Lock()


def default_directory() -> str | None:
  """The disk cache's directory (module docstring), or None when it is turned off."""
  value = os.environ.get(ENVIRONMENT_VARIABLE)
  if value is not None:
    if value.strip().lower() in _OFF:
      return None
    return os.path.abspath(os.path.expanduser(value))
  base = os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache')
  return os.path.join(base, 'tff_conflict', 'mapreduce')


def cache_key(computation_proto: pb.Computation, options: tf.compat.v1.ConfigProto) -> str:
  """The hex SHA-256 that names a compiled form (module docstring)."""
  digest = hashlib.sha256()
  for part in (MAGIC, str(FORMAT_VERSION).encode(), tf.__version__.encode(),
               tff.__version__.encode(), options.SerializeToString(deterministic=True),
               _fingerprint.fingerprint(computation_proto)):
    digest.update(len(part).to_bytes(8, 'little'))
    digest.update(part)
  return digest.hexdigest()


def encode(form: Any, key: str) -> bytes:
  """A form as the bytes of its cache file."""
  payload = pb.Computation(
      type=type_serialization.serialize_type(form.type_signature),
      struct=pb.Struct(element=[
          pb.Struct.Element(name=name,
                            value=computation_impl.ConcreteComputation.get_proto(
                                getattr(form, name)))
          for name in FIELDS])).SerializeToString(deterministic=True)
  return MAGIC + key.encode() + b'\n' + hashlib.sha256(payload).digest() + payload


def decode(data: bytes, key: str, type_signature: Any) -> Any:
  """The form in a cache file's bytes.

  Args:
    data: the file's bytes.
    key: the key the file must carry.
    type_signature: the compiled computation's type signature (with its Python containers,
      which the serialized type lacks); the stored one must be equivalent to it.

  Raises:
    ValueError: if `data` is not a valid entry for `key` (the message says why).
  """
  header = MAGIC + key.encode() + b'\n'
  if not data.startswith(header):
    raise ValueError('not an entry of this format for this key')
  checksum = data[len(header):len(header) + 32]
  payload = data[len(header) + 32:]
  if len(checksum) != 32 or hashlib.sha256(payload).digest() != checksum:
    raise ValueError('checksum mismatch (truncated or corrupt)')
  proto = pb.Computation.FromString(payload)
  if proto.WhichOneof('computation') != 'struct':
    raise ValueError('payload is not a struct of computations')
  names = [element.name for element in proto.struct.element]
  if names != list(FIELDS):
    raise ValueError(f'fields {names}, expected {list(FIELDS)}')
  stored_type = type_serialization.deserialize_type(proto.type)
  if not stored_type.is_equivalent_to(type_signature):
    raise ValueError(f'type {stored_type}, expected {type_signature}')
  components = {
      element.name: computation_impl.ConcreteComputation(
          computation_proto=element.value, context_stack=context_stack_impl.context_stack)
      for element in proto.struct.element}
  return tff.backends.mapreduce.MapReduceForm(type_signature=type_signature, **components)


def compile_map_reduce_form(computation: Any, options: tf.compat.v1.ConfigProto,
                            compile_fn: Callable[[], Any], directory: str | None,
                            use_memory: bool = True) -> tuple[Any, str]:
  """`compile_fn()` (which compiles `computation` with `options`), or its cached result.

  Args:
    computation: the `tff.Computation` being compiled (its proto and type signature key and check
      the entry).
    options: the compiler options `compile_fn` uses.
    compile_fn: compiles the form; its exceptions propagate (nothing is cached then).
    directory: the disk cache's directory; None: no disk cache.
    use_memory: whether to use (and fill) this process's cache.

  Returns:
    (the form, where it came from: 'memory', 'disk' or 'compiled').
  """
  proto = computation_impl.ConcreteComputation.get_proto(computation)
  key = cache_key(proto, options)
  if use_memory:
    with _memory_lock:
      form = _memory.get(key)
      if form is not None:
        _memory.move_to_end(key)
    if form is not None:
      return _with_type_signature(form, computation.type_signature), 'memory'
  source = 'compiled'
  form = _read(directory, key, computation.type_signature) if directory else None
  if form is None:
    form = compile_fn()
    if directory:
      _write(directory, key, form)
  else:
    source = 'disk'
  if use_memory:
    with _memory_lock:
      _memory[key] = form
      while len(_memory) > MEMORY_ENTRIES:
        _memory.popitem(last=False)
  return form, source


def _with_type_signature(form: Any, type_signature: Any) -> Any:
  """`form` typed as `type_signature`, an equivalent type (the key, like the serialized type,
  ignores Python containers, so an equal key may come with other containers)."""
  if form.type_signature == type_signature:  # also compares Python containers
    return form
  return tff.backends.mapreduce.MapReduceForm(
      type_signature=type_signature, **{name: getattr(form, name) for name in FIELDS})


def clear_memory() -> None:
  """Forgets the forms held in this process."""
  with _memory_lock:
    _memory.clear()


def _path(directory: str, key: str) -> str:
  return os.path.join(directory, key + SUFFIX)


def _read(directory: str, key: str, type_signature: Any) -> Any:
  path = _path(directory, key)
  try:
    with open(path, 'rb') as f:
      data = f.read()
  except OSError:
    return None
  try:
    form = decode(data, key, type_signature)
  except Exception:  # pylint: disable=broad-except
    _remove(path)  # corrupt or foreign: compiled again and rewritten
    return None
  try:
    os.utime(path)  # most recently used
  except OSError:
    pass
  return form


def _write(directory: str, key: str, form: Any) -> None:
  try:
    data = encode(form, key)
    os.makedirs(directory, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=directory, prefix=f'.{key[:16]}-', suffix='.tmp')
  except Exception:  # pylint: disable=broad-except
    return  # best effort: e.g. a read-only or missing parent directory
  try:
    with os.fdopen(handle, 'wb') as f:
      f.write(data)
    os.replace(temporary, _path(directory, key))
  except OSError:
    _remove(temporary)
    return
  _evict(directory)


def _evict(directory: str) -> None:
  """Keeps the `DISK_ENTRIES` most recently used entries of `directory`, and removes temporary
  files that a write killed midway left behind (older than `_STALE_TEMPORARY_S`)."""
  now = time.time()
  try:
    entries = []
    with os.scandir(directory) as scan:
      for entry in scan:
        if not entry.is_file():
          continue
        if entry.name.endswith(SUFFIX):
          entries.append((entry.stat().st_mtime, entry.path))
        elif entry.name.endswith('.tmp') and now - entry.stat().st_mtime > _STALE_TEMPORARY_S:
          _remove(entry.path)
  except OSError:
    return
  entries.sort(reverse=True)
  for _, path in entries[DISK_ENTRIES:]:
    _remove(path)


def _remove(path: str) -> None:
  try:
    os.remove(path)
  except OSError:
    pass
