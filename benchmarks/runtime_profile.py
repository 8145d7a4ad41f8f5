"""Where an in-process round's time goes, stage by stage (`InProcessRunner`).

    .venv/bin/python -m benchmarks.runtime_profile                       # digits, fedavg, K=10
    .venv/bin/python -m benchmarks.runtime_profile --preset=cnn --algorithm=fedgh --clients=50

Same cases as `benchmarks.runtime`. The runner's internals are wrapped with timers (wall and CPU
seconds) and one cold start (construction, `initialize`, round 1) and `--rounds` - 1 later rounds
are run. Stages:
  compile next / compile initialize   TFF's MapReduceForm compiler (Python)
  compile cache: ...                  the computation's fingerprint, reading or writing the form
                                      (`--cache_dir`; `tff_conflict.runtime._form_cache`)
  stamp <component>                   the component's graph rewritten and imported as a function
  check buffered leaves               the gathered-stack check ('buffered' accumulation)
  call <component>                    its calls; the first includes TensorFlow's instantiation
                                      (placement, Grappler for `work`, kernels)
  client step                         per client: `work` (and `accumulate` fused into it on the
                                      chain path), apart from the `call work` nested in it
  client data                         datasets flattened to variant tensors
  results to numpy                    the round's outputs converted and packed
  wait for the warm-up                the caller waiting for the warm-up's thread
  warm-up: <stage>                    the same stages run on the warm-up's thread (`warm_start`,
                                      `tff_conflict.runtime._warmup`): they overlap the others
Each stage's time excludes the stages nested in it (stamping inside the staged compiler, calls
inside a client step), so the caller's stages add up to its total. CPU seconds are the process's
(TensorFlow runs a call's ops on threads of its own): stages of the caller and of the warm-up
that overlap each count the other's CPU too, so with the warm-up on only the total is exact.
The table gives each stage's time in round 1 (with construction) and per later round, and how
many calls that was. `--no_warm_start` profiles the runner without the warm-up.
"""

import argparse
import collections
import contextlib
import os
import shutil
import tempfile
import threading
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

from benchmarks import runtime as runtime_benchmark  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top


class Timers:
  """Wall and CPU seconds and call counts per stage, in the current phase; each stage's
  time excludes the stages nested in it (per thread). Stages on other threads than the one that
  built this object are named 'warm-up: <stage>'."""

  def __init__(self):
    self.phase = 'cold'
    self.table = collections.defaultdict(lambda: [0.0, 0.0, 0])
    self._main = threading.get_ident()
    self._local = threading.local()
    self._lock = threading.Lock()

  @contextlib.contextmanager
  def stage(self, name):
    if threading.get_ident() != self._main:
      name = f'warm-up: {name}'
    stack = self._local.__dict__.setdefault('stack', [])
    stack.append([0.0, 0.0])  # time of the stages nested in this one
    wall, cpu = time.perf_counter(), time.process_time()
    try:
      yield
    finally:
      wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
      nested_wall, nested_cpu = stack.pop()
      if stack:
        stack[-1][0] += wall
        stack[-1][1] += cpu
      with self._lock:
        entry = self.table[(self.phase, name)]
        entry[0] += wall - nested_wall
        entry[1] += cpu - nested_cpu
        entry[2] += 1


def instrument(timers):
  """Wraps the runner's stages with `timers` (monkeypatching; for this script only)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_conflict.runtime import _tf_stamp  # pylint: disable=g-import-not-at-top
  from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top

  def wrap(owner, attr, name_fn):
    original = getattr(owner, attr)

    def wrapped(*args, **kwargs):
      if not tf.executing_eagerly():
        return original(*args, **kwargs)
      with timers.stage(name_fn(*args, **kwargs)):
        return original(*args, **kwargs)

    setattr(owner, attr, wrapped)

  from tff_conflict.runtime import _fingerprint  # pylint: disable=g-import-not-at-top
  from tff_conflict.runtime import _form_cache  # pylint: disable=g-import-not-at-top
  from tff_conflict.runtime import _staged_compile  # pylint: disable=g-import-not-at-top
  from tff_conflict.runtime import _warmup  # pylint: disable=g-import-not-at-top
  mapreduce = tff.backends.mapreduce
  wrap(_staged_compile, 'map_reduce_form', lambda *a, **k: 'compile next')
  wrap(mapreduce, 'get_state_initialization_computation', lambda *a, **k: 'compile initialize')
  wrap(_fingerprint, 'fingerprint', lambda *a, **k: 'compile cache: fingerprint')
  wrap(_form_cache, '_read', lambda *a, **k: 'compile cache: read form')
  wrap(_form_cache, '_write', lambda *a, **k: 'compile cache: write form')
  original_init = _tf_stamp.StampedComputation.__init__

  def stamp_init(self, comp, name, **kwargs):
    with timers.stage(f'stamp {name}'):
      original_init(self, comp, name, **kwargs)

  _tf_stamp.StampedComputation.__init__ = stamp_init
  wrap(_tf_stamp.StampedComputation, 'call_tensors', lambda self, *a: f'call {self.name}')
  step_class = inprocess._ClientStep  # pylint: disable=protected-access
  wrap(step_class, 'work_only', lambda *a: 'client step')
  wrap(step_class, 'accumulated', lambda *a: 'client step')
  wrap(inprocess.InProcessRunner, '_find_buffered_leaves',
       lambda *a: 'check buffered leaves')
  wrap(_warmup.Warmup, 'wait', lambda *a: 'wait for the warm-up')
  original_add = _warmup.Warmup.add

  def add(self, name, fn):
    def timed():
      with timers.stage('placeholder inputs and the rest'):  # its calls are stages of their own
        return fn()
    original_add(self, name, timed)

  _warmup.Warmup.add = add
  wrap(inprocess.InProcessRunner, '_to_python', lambda *a, **k: 'results to numpy')
  wrap(_tf_stamp, 'to_tensor', lambda value, spec: 'client data'
       if spec.dtype == tf.variant else 'state to tensors')


def main():
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--preset', default='digits', choices=runtime_benchmark.PRESETS)
  parser.add_argument('--algorithm', default='fedavg', choices=runtime_benchmark.ALGORITHMS)
  parser.add_argument('--clients', type=int, default=10)
  parser.add_argument('--rounds', type=int, default=4)
  parser.add_argument('--examples', type=int, default=20, help='examples per client (cnn)')
  parser.add_argument('--threads', type=int, default=1)
  parser.add_argument('--no_warm_start', action='store_true',
                      help='the runner without the warm-up (warm_start=False)')
  parser.add_argument('--cache_dir', default=None,
                      help='the compile cache; default: a new empty directory (the form is '
                      'compiled). A directory that an earlier run filled profiles the cached path.')
  args = parser.parse_args()
  if args.rounds < 2 or args.clients < 1 or args.threads < 1:
    parser.error('--rounds >= 2, --clients and --threads >= 1')
  runtime.set_local_context()
  if args.preset == 'digits':
    case = runtime_benchmark.digits_case(args.algorithm, args.clients)
  else:
    case = runtime_benchmark.cnn_case(args.algorithm, args.clients, args.examples)
  timers = Timers()
  instrument(timers)
  from tff_conflict.runtime import inprocess  # pylint: disable=g-import-not-at-top
  totals = {}
  start, cpu = time.perf_counter(), time.process_time()
  cache_dir = args.cache_dir or tempfile.mkdtemp(prefix='tff_conflict_profile_')
  runner = inprocess.InProcessRunner(case.process, num_threads=args.threads,
                                     compile_cache=cache_dir,
                                     warm_start=not args.no_warm_start)
  state = runner.initialize()
  data = case.datasets(1)
  state = runner.next(state, data).state
  totals['cold'] = (time.perf_counter() - start, time.process_time() - cpu)
  timers.phase = 'later'
  start, cpu = time.perf_counter(), time.process_time()
  for round_num in range(2, args.rounds + 1):
    data = case.datasets(round_num)
    state = runner.next(state, data).state
  later_rounds = args.rounds - 1
  totals['later'] = ((time.perf_counter() - start) / later_rounds,
                     (time.process_time() - cpu) / later_rounds)
  runtime.shutdown_workers()
  if args.cache_dir is None:
    shutil.rmtree(cache_dir, ignore_errors=True)

  print(f'{args.preset}, {args.algorithm}, {args.clients} clients, {args.threads} thread(s), '
        f'MapReduceForm {runner.form_source}, warm-up {"off" if args.no_warm_start else "on"} '
        f'(warmed: {", ".join(runner.warmed_functions) or "-"}); '
        f'load average {"/".join(f"{x:.1f}" for x in os.getloadavg())}')
  print()
  print('| stage | cold: wall s | cold: CPU s | calls | later round: wall s | CPU s | calls |')
  print('|---|---|---|---|---|---|---|')
  names = sorted({name for _, name in timers.table},
                 key=lambda n: -timers.table[('cold', n)][1])
  for name in names:
    cold = timers.table.get(('cold', name), [0.0, 0.0, 0])
    later = timers.table.get(('later', name), [0.0, 0.0, 0])
    print(f'| {name} | {cold[0]:.3f} | {cold[1]:.3f} | {cold[2]} | {later[0] / later_rounds:.4f} '
          f'| {later[1] / later_rounds:.4f} | {later[2] / later_rounds:g} |')
  print(f'| **total** (CPU: all threads) | {totals["cold"][0]:.3f} | {totals["cold"][1]:.3f} | | '
        f'{totals["later"][0]:.4f} | {totals["later"][1]:.4f} | |')


if __name__ == '__main__':
  main()
