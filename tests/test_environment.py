"""The pinned environment keeps what the project's speed relies on (BUILD_NOTES.md)."""

from google.protobuf.internal import api_implementation


def test_protobuf_uses_a_compiled_backend():
  # TFF serializes a computation's graphs with protobuf on every call. The pure-Python backend
  # (protobuf 3.20.3 on Python 3.11) made that cost about 0.2 s per round for the conflict
  # aggregators' graphs alone; requirements.lock pins protobuf 4.25.9, whose `upb` backend is
  # compiled.
  assert api_implementation.Type() in ('upb', 'cpp'), (
      f'protobuf runs its pure-Python backend ({api_implementation.Type()!r}): TFF rounds will be '
      'slow. See BUILD_NOTES.md, "Pins that deviate", protobuf.')
