"""Time and peak memory of rounds of 1 to 500 clients, per method and runtime:
`python -m perf.cohorts [--sizes=1,10,100,500] [--methods=fedavg,fedgh] [--runtimes=cpp]` prints
a Markdown table."""

import argparse
import os
import subprocess
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')


MB = 2**20
METHODS = {'FedAvg': 'fedavg', 'FedGH': 'fedgh', 'DGC (FedMGC)': 'fedmgc',
           'principal (FedLD)': 'fedld', 'corrective': 'fed_corrective'}
NUM_CLIENTS, EXAMPLES, FEATURES, CLASSES = 600, 20, 64, 10


def _child(method, kind, sizes):
  """Builds `method`, runs a warm-up round of 10 clients, then prints a ROW line per cohort size:
  the wall time of `next` (or the C++ gather guard's refusal) and the peak RSS of this process
  plus its TFF workers; before a C++ round, the gather estimate beside the limit."""
  import collections  # pylint: disable=g-import-not-at-top
  import functools  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict import models  # pylint: disable=g-import-not-at-top
  from perf.memory import PeakRss  # pylint: disable=g-import-not-at-top
  from tff_conflict import aggregators  # pylint: disable=g-import-not-at-top
  from tff_conflict.aggregators import _gather  # pylint: disable=g-import-not-at-top,protected-access
  from tff_conflict import data  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  from tff_conflict import runtime  # pylint: disable=g-import-not-at-top
  runtime.set_local_context()
  rng = np.random.default_rng(0)
  n = NUM_CLIENTS * EXAMPLES
  train = data.partition_to_client_data(
      rng.normal(size=(n, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, n),
      np.split(np.arange(n), NUM_CLIENTS))
  ids = train.client_ids
  spec = collections.OrderedDict(x=tf.TensorSpec([None, FEATURES], tf.float32),
                                 y=tf.TensorSpec([None], tf.int32))
  model_fn = functools.partial(models.mlp, (FEATURES,), CLASSES, seed=0)
  start = time.monotonic()
  process = learning.ALGORITHMS[method](
      model_fn, input_spec=spec,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.05))
  runner = process if kind == 'cpp' else runtime.make_runner(process, kind)
  state = runner.initialize()
  params = sum(int(np.prod(w.shape)) for w in runner.get_model_weights(state).trainable)

  def datasets(k):
    return [train.create_tf_dataset_for_client(c).batch(EXAMPLES) for c in ids[:k]]

  state = runner.next(state, datasets(10)).state
  print(f'# {method} {kind}: {params} parameters; build + first round '
        f'{time.monotonic() - start:.0f} s', flush=True)
  for k in sizes:
    note = ''
    if kind == 'cpp' and method != 'fedavg':
      estimate = _gather.estimated_gather_bytes(4 * params, k)
      limit = aggregators.max_gather_bytes()
      note = (f' gather estimate {estimate / MB:.0f} MB, limit '
              f'{"none" if not limit else f"{limit / MB:.0f} MB"}')
    cohort = datasets(k)
    with PeakRss() as peak:
      begin = time.monotonic()
      try:
        state = runner.next(state, cohort).state
        outcome = f'{time.monotonic() - begin:.2f}'
      except Exception as e:  # pylint: disable=broad-except
        text = str(e)
        guard = text.find('tff_conflict.aggregators: refusing')
        outcome = 'refused: ' + (text[guard:guard + 240].replace('\n', ' ') if guard >= 0 else
                                 f'{type(e).__name__}: {text.splitlines()[0][:300]}')
    print(f'ROW\t{method}\t{kind}\t{k}\t{outcome}\t{peak.peak_total / MB:.0f}\t{note}',
          flush=True)
  runtime.shutdown_workers()


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--sizes', default='1,10,100,500')
  parser.add_argument('--methods', default=','.join(METHODS.values()))
  parser.add_argument('--runtimes', default='inprocess,cpp')
  parser.add_argument('--child', nargs=2, metavar=('METHOD', 'RUNTIME'), help=argparse.SUPPRESS)
  args = parser.parse_args()
  sizes = [int(s) for s in args.sizes.split(',')]
  if args.child:
    _child(*args.child, sizes)
    return
  names = {v: k for k, v in METHODS.items()}
  print('| method | runtime | clients per round | round (s) | peak RSS, process + workers (MB) '
        '| note |\n|---|---|---|---|---|---|', flush=True)
  for method in args.methods.split(','):
    for kind in args.runtimes.split(','):  # a fresh process per method and runtime
      result = subprocess.run(
          [sys.executable, '-m', 'perf.cohorts', f'--sizes={args.sizes}', '--child',
           method, kind], capture_output=True, text=True, check=False,
          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
      lines = result.stdout.splitlines()
      for line in lines:
        if line.startswith('# '):
          print(line, file=sys.stderr, flush=True)
        if line.startswith('ROW\t'):
          _, m, k, size, outcome, peak, note = line.split('\t')
          print(f'| {names.get(m, m)} | {k} | {size} | {outcome} | {peak} | {note.strip()} |',
                flush=True)
      if result.returncode:
        print(f'| {names.get(method, method)} | {kind} | - | failed (exit {result.returncode}): '
              f'{result.stderr.strip().splitlines()[-1][:300] if result.stderr.strip() else ""} '
              '| | |', flush=True)


if __name__ == '__main__':
  main()
