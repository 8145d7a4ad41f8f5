"""Reads one IDX file (LeCun's MNIST format, gzip-compressed or not) into a NumPy array; a file
that is not valid IDX raises `IdxFormatError` naming it."""

import gzip
import os
import zlib

import numpy as np

# The type byte of the magic number -> the big-endian element type (LeCun's MNIST page).
DTYPES = {0x08: '>u1', 0x09: '>i1', 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4', 0x0E: '>f8'}
_GZIP_MAGIC = b'\x1f\x8b'


class IdxFormatError(ValueError):
  """A file whose content is not a valid IDX array (or not the one expected); the message names
  the file."""


def _read_bytes(path: str) -> bytes:
  with open(path, 'rb') as f:
    content = f.read()
  if not content.startswith(_GZIP_MAGIC):
    return content
  try:
    return gzip.decompress(content)
  except (EOFError, OSError, zlib.error) as e:   # truncated or damaged gzip stream
    raise IdxFormatError(f'{path}: not a readable gzip file ({e})') from None


def read_idx(path) -> np.ndarray:
  """The array of an IDX file, in native byte order with the file's dimensions.

  The format: bytes 0-1 zero; byte 2 the element type (`DTYPES`); byte 3 the number of
  dimensions d; then d big-endian uint32 sizes; then the prod(sizes) elements, big-endian, row
  major, and nothing after them. A file that starts with gzip's magic bytes is decompressed first.

  Raises:
    OSError: the file cannot be opened (`FileNotFoundError` when it does not exist).
    IdxFormatError: a damaged gzip stream, a wrong magic number, or too few or too many bytes for
      the dimensions the header gives; the message names the file.
  """
  path = os.fspath(path)
  content = _read_bytes(path)
  if len(content) < 4 or content[:2] != b'\x00\x00' or content[2] not in DTYPES:
    raise IdxFormatError(
        f'{path}: not an IDX file (magic number {content[:4].hex() or "missing"}; IDX files start '
        f'with 00 00, a type byte {"/".join(f"{t:02x}" for t in DTYPES)} and the number of '
        'dimensions)')
  dtype, ndim = np.dtype(DTYPES[content[2]]), content[3]
  header = 4 + 4 * ndim
  if len(content) < header:
    raise IdxFormatError(f'{path}: truncated IDX header ({len(content)} bytes; {ndim} '
                         f'dimensions need {header})')
  shape = tuple(int(d) for d in np.frombuffer(content, '>u4', count=ndim, offset=4))
  expected = header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
  if len(content) != expected:
    raise IdxFormatError(
        f'{path}: {"truncated" if len(content) < expected else "trailing bytes after the data"}: '
        f'the header gives shape {shape} of {dtype.name} ({expected} bytes in all) but the file '
        f'holds {len(content)} bytes')
  data = np.frombuffer(content, dtype, offset=header).reshape(shape)
  return data.astype(dtype.newbyteorder('='))
