"""Time and memory of building the federated data sets (`tff_conflict.data`):
`python -m perf.data_loading [--emnist_clients=3400]` prints a line each for digits, synthetic,
the Dirichlet partition, a CIFAR-sized `ArrayClientData` and EMNIST on a fake SQLite file."""

import argparse
import os
import sqlite3
import tempfile
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import psutil  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_conflict import runtime  # pylint: disable=g-import-not-at-top


def _rss_mb():
  return psutil.Process().memory_info().rss / 2**20


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return out, time.perf_counter() - start


def _fake_emnist(path, num_clients, per_client):
  """An SQLite file in TFF's EMNIST format: `num_clients` clients, `per_client` examples a split."""
  rng = np.random.default_rng(0)
  connection = sqlite3.connect(path)
  connection.execute('CREATE TABLE examples (split_name TEXT, client_id TEXT, '
                     'serialized_example_proto BLOB)')
  connection.execute('CREATE TABLE client_metadata (client_id TEXT, split_name TEXT, '
                     'num_examples INTEGER)')
  proto = tf.train.Example(features=tf.train.Features(feature={
      'pixels': tf.train.Feature(float_list=tf.train.FloatList(value=rng.random(784).tolist())),
      'label': tf.train.Feature(int64_list=tf.train.Int64List(value=[3])),
  })).SerializeToString()
  for split in ('all_train', 'all_test'):
    for k in range(num_clients):
      cid = f'f{k:04d}'
      connection.executemany('INSERT INTO examples VALUES (?, ?, ?)',
                             [(split, cid, proto)] * per_client)
      connection.execute('INSERT INTO client_metadata VALUES (?, ?, ?)', (cid, split, per_client))
  connection.execute('CREATE INDEX idx ON examples (client_id, split_name)')
  connection.commit()
  connection.close()


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--emnist_clients', type=int, default=3400)
  parser.add_argument('--emnist_examples', type=int, default=20)
  args = parser.parse_args()
  runtime.set_local_context()
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  from tff_conflict.data import client_data as client_data_lib  # pylint: disable=g-import-not-at-top

  _, cold = _timed(data.digits)
  _, warm = _timed(data.digits)
  print(f'digits(): cold {cold:.3f} s, warm {warm:.3f} s')
  _, t = _timed(lambda: data.synthetic(1.0, 1.0))
  print(f'synthetic(1, 1): {t:.3f} s')
  labels = np.random.default_rng(0).integers(0, 10, 50000)
  _, t = _timed(lambda: data.dirichlet_partition(labels, 100, 0.1, seed=0))
  print(f'dirichlet_partition(50000 labels, 100 clients, alpha 0.1): {t:.3f} s')

  images = np.random.default_rng(0).integers(0, 256, (50000, 32, 32, 3), dtype=np.uint8)
  parts = data.dirichlet_partition(labels, 100, 0.1, seed=0)
  before = _rss_mb()
  cd, t_build = _timed(lambda: client_data_lib.ArrayClientData(
      images, labels, parts, transform=lambda v: tf.cast(v, tf.float32) / 255.0))
  _, t_client = _timed(lambda: sum(1 for _ in cd.create_tf_dataset_for_client('00')))
  print(f'ArrayClientData(CIFAR-sized uint8, 100 clients): build {t_build:.3f} s, one client '
        f'({parts[0].size} examples) iterated {t_client:.3f} s, RSS +{_rss_mb() - before:.0f} MB '
        f'(images: {images.nbytes / 2**20:.0f} MB)')

  with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, 'emnist_all.sqlite')
    _, t = _timed(lambda: _fake_emnist(path, args.emnist_clients, args.emnist_examples))
    size = os.path.getsize(path) / 2**20
    before = _rss_mb()
    (train, _), t_build = _timed(lambda: data.emnist(cache_dir=tmp))
    grown = _rss_mb() - before
    _, t_client = _timed(lambda: sum(1 for _ in train.create_tf_dataset_for_client('f0000')))
    print(f'emnist() on a fake SQLite file ({args.emnist_clients} clients x '
          f'{args.emnist_examples} examples per split, {size:.0f} MB, written in {t:.1f} s): '
          f'build {t_build:.3f} s, RSS +{grown:.0f} MB, one client iterated {t_client:.3f} s, '
          f'{len(train.client_ids)} client ids')


if __name__ == '__main__':
  main()
