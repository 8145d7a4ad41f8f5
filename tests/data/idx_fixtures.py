"""Small IDX files written by the tests: a writer of the format and a tiny Fashion-MNIST folder."""

import gzip
import os

import numpy as np

# dtype -> the type byte of the IDX magic number.
_TYPE_BYTES = {'uint8': 0x08, 'int8': 0x09, 'int16': 0x0B, 'int32': 0x0C, 'float32': 0x0D,
               'float64': 0x0E}


def idx_bytes(array) -> bytes:
  """`array` in the IDX format: 00 00, type byte, rank, big-endian uint32 sizes, big-endian data."""
  array = np.asarray(array)
  header = bytes([0, 0, _TYPE_BYTES[array.dtype.name], array.ndim])
  sizes = np.asarray(array.shape, '>u4').tobytes()
  return header + sizes + array.astype(array.dtype.newbyteorder('>')).tobytes()


def write_idx(path, array, *, compress=True) -> str:
  content = idx_bytes(array)
  with open(path, 'wb') as f:
    f.write(gzip.compress(content) if compress else content)
  return str(path)


def fashion_mnist_dir(directory, *, train_per_class=6, test_per_class=3, seed=0, compress=True):
  """Writes the four Fashion-MNIST files of a tiny random set (10 classes, shuffled) into
  `directory` (created); returns `{'train': (x, y), 'test': (x, y)}`, x uint8 [N, 28, 28]."""
  os.makedirs(directory, exist_ok=True)
  rng = np.random.default_rng(seed)
  arrays = {}
  for split, prefix, per_class in (('train', 'train', train_per_class),
                                   ('test', 't10k', test_per_class)):
    y = rng.permutation(np.repeat(np.arange(10, dtype=np.uint8), per_class))
    x = rng.integers(0, 256, (y.size, 28, 28), dtype=np.uint8)
    suffix = '.gz' if compress else ''
    write_idx(os.path.join(directory, f'{prefix}-images-idx3-ubyte{suffix}'), x,
              compress=compress)
    write_idx(os.path.join(directory, f'{prefix}-labels-idx1-ubyte{suffix}'), y,
              compress=compress)
    arrays[split] = (x, y)
  return arrays
