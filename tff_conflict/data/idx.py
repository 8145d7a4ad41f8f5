"""Reads IDX files (LeCun's MNIST format, gzip-compressed or not) into NumPy arrays (`read_idx`),
and a folder of MNIST's four files, as MNIST and Fashion-MNIST ship (`read_image_set`); a file
that is not valid IDX, or not the images expected, raises `IdxFormatError` naming it."""

import gzip
import os
import zlib

from typing import Optional

import numpy as np

# The type byte of the magic number -> the big-endian element type (LeCun's MNIST page).
DTYPES = {0x08: '>u1', 0x09: '>i1', 0x0B: '>i2', 0x0C: '>i4', 0x0D: '>f4', 0x0E: '>f8'}
_GZIP_MAGIC = b'\x1f\x8b'
# split -> (images, labels): the names of LeCun's MNIST release, which Zalando's Fashion-MNIST,
# Keras and Debian keep.
FILES = {'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
         'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')}
FILE_NAMES = tuple(name for pair in FILES.values() for name in pair)


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


def find_file(directory: str, name: str) -> Optional[str]:
  """`directory/name`, or the same without '.gz' (a decompressed copy); None when neither is."""
  for candidate in (name, name[:-len('.gz')]):
    path = os.path.join(directory, candidate)
    if os.path.isfile(path):
      return path
  return None


def missing_files(directory: str) -> list[str]:
  """Which of the four `FILE_NAMES` `directory` lacks (compressed or not)."""
  return [name for name in FILE_NAMES if find_file(directory, name) is None]


def check_images(images: np.ndarray, labels: np.ndarray, images_path: str, labels_path: str, *,
                 num_classes: int, image_size: tuple = (28, 28)) -> tuple[np.ndarray, np.ndarray]:
  """`(x uint8 [N, H, W, 1], y int32 [N])` of uint8 `images` [N, H, W] and `labels` [N] in
  0..num_classes-1; else `IdxFormatError` naming the file (its `images_path` or `labels_path`)."""
  if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != tuple(image_size):
    raise IdxFormatError(f'{images_path}: expected uint8 images [N, {image_size[0]}, '
                         f'{image_size[1]}], got {images.dtype.name} {list(images.shape)}')
  if labels.dtype != np.uint8 or labels.ndim != 1:
    raise IdxFormatError(f'{labels_path}: expected uint8 labels [N], got '
                         f'{labels.dtype.name} {list(labels.shape)}')
  if images.shape[0] == 0:
    raise IdxFormatError(f'{images_path}: no images')
  if labels.size != images.shape[0]:
    raise IdxFormatError(f'{labels_path}: {labels.size} labels for the {images.shape[0]} '
                         f'images of {images_path}')
  if labels.max() >= num_classes:
    raise IdxFormatError(f'{labels_path}: labels must be in 0..{num_classes - 1}, got '
                         f'{int(labels.max())} (example {int(np.argmax(labels))})')
  return images[..., None], labels.astype(np.int32)


def read_image_set(directory: str, *, num_classes: int = 10):
  """`((x_train, y_train), (x_test, y_test))` from the four `FILES` in `directory`: x uint8
  [N, 28, 28, 1], y int32 [N] (`check_images`).

  Raises:
    FileNotFoundError: a file is missing.
    IdxFormatError: a file is damaged or not what `check_images` expects; the message names it.
  """
  splits = []
  for images_name, labels_name in FILES.values():
    images_path, labels_path = (find_file(directory, name) or os.path.join(directory, name)
                                for name in (images_name, labels_name))
    splits.append(check_images(read_idx(images_path), read_idx(labels_path), images_path,
                               labels_path, num_classes=num_classes))
  return tuple(splits)
