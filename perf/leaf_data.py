"""`data.leaf` at FEMNIST's scale: conversion, reopening, per-client reads and a training run on a
fixture: `python -m perf.leaf_data [--users=3500] [--dir=/tmp]` (the default size needs about 13 GB
of free disk under `--dir`)."""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import psutil  # pylint: disable=g-import-not-at-top

from perf import leaf_fixture  # pylint: disable=g-import-not-at-top
from perf.memory import PeakRss  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 2**30
MB = 2**20


def _workers_with_token(token):
  return runtime.workers_with_environment('TFF_CONFLICT_BENCH_TOKEN', token)


def _du(path):
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def _load():
  return ' '.join(f'{v:.1f}' for v in os.getloadavg())


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--users', type=int, default=3500)
  parser.add_argument('--mean_samples', type=int, default=230)
  parser.add_argument('--dir', default=None, help='where to create the temporary folder')
  parser.add_argument('--keep', action='store_true',
                      help='keep the fixture folder (deleted at the end otherwise)')
  parser.add_argument('--skip_train', action='store_true', help='no training run')
  args = parser.parse_args()
  runtime.set_local_context()
  from tff_conflict import data  # pylint: disable=g-import-not-at-top

  tmp = tempfile.mkdtemp(prefix='leaf_bench_', dir=args.dir)
  try:
    print(f'load average (1, 5, 15 min) at start: {_load()}', flush=True)
    start = time.perf_counter()
    stats = leaf_fixture.write_femnist(tmp, users=args.users, mean_samples=args.mean_samples)
    print(f'fixture: {stats.users} users, {stats.train_examples} train + {stats.test_examples} '
          f'test examples, {stats.num_files} files, {stats.json_bytes / GB:.2f} GB of JSON '
          f'(largest file {stats.largest_file_bytes / MB:.0f} MB), written in '
          f'{time.perf_counter() - start:.0f} s', flush=True)
    root = os.path.join(tmp, 'data', 'femnist')

    rss_before = psutil.Process().memory_info().rss
    with PeakRss() as peak:
      start, start_cpu = time.perf_counter(), time.process_time()
      train, test = data.leaf(root)
      build_s, build_cpu = time.perf_counter() - start, time.process_time() - start_cpu
    cache_bytes = _du(train.cache_path)
    print(f'first call (conversion): {build_s:.1f} s wall, {build_cpu:.1f} s CPU = '
          f'{stats.json_bytes / MB / build_cpu:.0f} MB/s of JSON per CPU second; process RSS '
          f'{rss_before / MB:.0f} '
          f'MB before, peak {peak.peak[0] / MB:.0f} MB (+{(peak.peak[0] - rss_before) / MB:.0f} MB) '
          f'for {stats.json_bytes / GB:.2f} GB of JSON text ({stats.largest_file_bytes / MB:.0f} '
          f'MB largest file); cache {cache_bytes / GB:.2f} GB', flush=True)

    start = time.perf_counter()
    train, test = data.leaf(root)
    print(f'second call (opens the cache): {time.perf_counter() - start:.3f} s', flush=True)

    rng = np.random.default_rng(0)
    times, sizes = [], []
    for cid in rng.choice(train.client_ids, 20, replace=False):
      start = time.perf_counter()
      sizes.append(sum(1 for _ in train.create_tf_dataset_for_client(str(cid))))
      times.append(time.perf_counter() - start)
    print(f'one client (create + iterate, 20 random clients of {min(sizes)}-{max(sizes)} '
          f'examples): median {np.median(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms',
          flush=True)

    start = time.perf_counter()
    summary_train, summary_test = data.describe(train), data.describe(test)
    describe_s = time.perf_counter() - start
    checks = {
        'train clients': (summary_train['num_clients'], stats.users),
        'test clients': (summary_test['num_clients'], stats.users),
        'train examples': (summary_train['num_examples'], stats.train_examples),
        'test examples': (summary_test['num_examples'], stats.test_examples),
    }
    for what, (got, want) in checks.items():
      print(f'describe {what}: {got} (files: {want}) {"OK" if got == want else "MISMATCH"}')
    print(f'describe (train and test): {describe_s:.3f} s\n{summary_train}', flush=True)
    if any(got != want for got, want in checks.values()):
      sys.exit('describe does not match the files')

    if not args.skip_train:
      token = uuid.uuid4().hex
      command = [sys.executable, '-m', 'experiments.train', '--dataset=leaf',
                 f'--leaf_dir={root}', '--rounds=2', '--clients_per_round=10', '--eval_every=0',
                 '--noprogress', f'--output_dir={os.path.join(tmp, "out")}']
      start = time.perf_counter()
      result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True,
                              env=dict(os.environ, TFF_CONFLICT_BENCH_TOKEN=token), check=False)
      train_s = time.perf_counter() - start
      time.sleep(2)
      left = _workers_with_token(token)
      print(f'experiments.train --dataset=leaf --rounds=2 --clients_per_round=10: exit '
            f'{result.returncode} in {train_s:.0f} s, TFF workers left: {len(left)}')
      print('\n'.join(result.stdout.strip().splitlines()[-3:]), flush=True)
      if result.returncode or left:
        print(result.stderr[-3000:])
        sys.exit('the training run failed or left a worker')
    print(f'load average (1, 5, 15 min) at end: {_load()}')
  finally:
    if args.keep:
      print(f'kept {tmp}')
    else:
      shutil.rmtree(tmp, ignore_errors=True)


if __name__ == '__main__':
  main()
