"""Writes a LEAF-format FEMNIST fixture of any size, random pixels in LEAF's files and JSON text:
`python -m perf.leaf_fixture DIR [--users=3500] [--mean_samples=230]` (the full-scale default
writes about 12 GB under DIR)."""

import argparse
import dataclasses
import json
import os

import numpy as np

USERS_PER_FILE = 100  # LEAF's data/femnist/preprocess/data_to_json.py: MAX_WRITERS
TRAIN_FRACTION = 0.9


@dataclasses.dataclass
class FixtureStats:
  """What was written: users and examples per split, total JSON bytes, files."""
  root: str
  users: int
  train_examples: int
  test_examples: int
  json_bytes: int
  num_files: int
  largest_file_bytes: int


def _render_rows(rng, pool_rows: int) -> list[bytes]:
  values = [repr(k / 255).encode() for k in range(256)]
  pixels = rng.integers(0, 256, (pool_rows, 784))
  return [b'[' + b', '.join(values[v] for v in row) + b']' for row in pixels]


def _user_bytes(user: str, rows: list[bytes], labels: np.ndarray) -> bytes:
  return (json.dumps(user).encode() + b': {"x": [' + b', '.join(rows) + b'], "y": '
          + json.dumps(labels.tolist()).encode() + b'}')


def write_femnist(root: str, *, users: int = 3500, mean_samples: int = 230, seed: int = 0,
                  pool_rows: int = 4096) -> FixtureStats:
  """Writes the fixture under `root` (LEAF's checkout layout); returns what it wrote.

  `root/data/femnist/data/{train,test}/*.json` as LEAF's `preprocess.sh -s niid --sf 1.0 -k 0 -t
  sample` writes them for FEMNIST: 100 writers per file (`data_to_json.py`), each writer's examples
  split by `split_data.py`'s rule (`max(1, int(0.9 n))` train, the rest test), the text as
  `json.dump` writes it (', ' and ': ' separators). Writer sizes are uniform in
  [mean / 2, 3 mean / 2], labels uniform in 0..61, pixels k / 255 for uniform k (the longest text
  per value), drawn from a pool of `pool_rows` pre-rendered rows to write quickly. Files are
  written user by user (the users' sizes are drawn first, so that `users` and `num_samples` can
  precede `user_data` as in LEAF's files): memory stays at one user's text.
  """
  rng = np.random.default_rng(seed)
  pool = _render_rows(rng, pool_rows)
  data_dir = os.path.join(root, 'data', 'femnist', 'data')
  for split in ('train', 'test'):
    os.makedirs(os.path.join(data_dir, split), exist_ok=True)
  sizes = rng.integers(max(2, mean_samples // 2), 3 * mean_samples // 2 + 1, users)
  stats = FixtureStats(root, users, 0, 0, 0, 0, 0)
  for file_index, start in enumerate(range(0, users, USERS_PER_FILE)):
    names = [f'f{u:04d}_{u % 100:02d}' for u in range(start, min(users, start + USERS_PER_FILE))]
    num_train = [max(1, int(TRAIN_FRACTION * n)) for n in sizes[start:start + len(names)]]
    counts = {'train': num_train,
              'test': [int(n) - t for n, t in zip(sizes[start:start + len(names)], num_train)]}
    paths, files = {}, {}
    for split in ('train', 'test'):
      paths[split] = os.path.join(data_dir, split,
                                  f'all_data_{file_index}_niid_0_keep_0_{split}_9.json')
      files[split] = open(paths[split], 'wb')  # pylint: disable=consider-using-with
      files[split].write(b'{"users": ' + json.dumps(names).encode() + b', "num_samples": '
                         + json.dumps(counts[split]).encode() + b', "user_data": {')
    for i, name in enumerate(names):
      for split, f in files.items():
        count = counts[split][i]
        rows = [pool[r] for r in rng.integers(0, pool_rows, count)]
        f.write((b', ' if i else b'') + _user_bytes(name, rows, rng.integers(0, 62, count)))
    for split, f in files.items():
      f.write(b'}}')
      f.close()
      size = os.path.getsize(paths[split])
      stats.json_bytes += size
      stats.num_files += 1
      stats.largest_file_bytes = max(stats.largest_file_bytes, size)
      setattr(stats, f'{split}_examples', getattr(stats, f'{split}_examples') + sum(counts[split]))
  return stats


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('root')
  parser.add_argument('--users', type=int, default=3500)
  parser.add_argument('--mean_samples', type=int, default=230)
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args()
  stats = write_femnist(args.root, users=args.users, mean_samples=args.mean_samples,
                        seed=args.seed)
  print(stats)


if __name__ == '__main__':
  main()
