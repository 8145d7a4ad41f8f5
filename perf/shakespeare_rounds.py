"""Round times of the Shakespeare character models on LEAF Shakespeare files, through the benchmark
binary (FedAvg, E=1, 10 clients a round): `python -m perf.shakespeare_rounds --leaf_dir=DIR`
(DIR: `tools/shakespeare_leaf.py`'s output or LEAF's `data/shakespeare`)."""

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--leaf_dir', required=True)
  parser.add_argument('--regime', default='leaf_shakespeare:natural(max=128)@50')
  parser.add_argument('--models', default='shakespeare_gru,leaf_shakespeare_lstm')
  parser.add_argument('--batch_sizes', default='32,64')
  parser.add_argument('--rounds', type=int, default=4)
  args = parser.parse_args()
  print(f'regime {args.regime}, FedAvg, E=1, 10 clients per round, {args.rounds} rounds; '
        's / round: the mean training round (runner.next) from round 2 on', flush=True)
  print('| model | batch | s / round | first round s | load (1 min) |\n|---|---|---|---|---|')
  with tempfile.TemporaryDirectory(prefix='shakespeare_rounds_') as out:
    for model in args.models.split(','):
      for batch in args.batch_sizes.split(','):
        name = f'{model}_{batch}'
        load = os.getloadavg()[0]
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, '-m', 'experiments.benchmark', f'--regimes={args.regime}',
             f'--leaf_dir={args.leaf_dir}', '--methods=fedavg', '--epochs=1',
             f'--rounds={args.rounds}', '--report_seeds=0', '--notune', f'--batch_size={batch}',
             f'--models=leaf_shakespeare:{model}', f'--output_dir={out}',
             f'--experiment_name={name}'], check=True, cwd=REPO_ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(os.path.join(out, name, 'runs.csv'), encoding='utf-8') as f:
          [row] = list(csv.DictReader(f))
        print(f'| {model} | {batch} | {float(row["seconds_per_round"]):.2f} | '
              f'{float(row["first_round_s"]):.1f} | {load:.1f} |  '
              f'({time.perf_counter() - start:.0f} s in all)', flush=True)


if __name__ == '__main__':
  main()
