"""Times the conflict kernels (`tff_conflict.conflict`) against their floor, the weighted mean and
loop references: `python -m perf.conflict_kernels [--K 50 --d 1e6 | --quick] [--memory]` prints
each kernel's median time and ratios (`--memory`: each method's peak-RSS growth)."""

import argparse
import math
import os
import statistics
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_conflict import conflict  # pylint: disable=g-import-not-at-top
from tff_conflict import runtime  # pylint: disable=g-import-not-at-top


# ----------------------------------------------------------------------------- loop references
# numpy in the input dtype, loops over clients and d-vectors: what the papers' pseudo-code does.
def _loop_fedgh(u, w, orders):
  out = []
  for k in range(len(u)):
    g = u[k].copy()
    for j in orders[k]:
      if j != k:
        dot = g @ u[j]
        if dot < 0:
          g -= dot / (u[j] @ u[j]) * u[j]
    out.append(g)
  w = w / w.sum()
  return sum(w[k] * out[k] for k in range(len(u)))


def _loop_dgc(u, losses, ratio=0.5):
  k_num = len(u)
  norms = [math.sqrt(float(x @ x)) for x in u]
  p = np.zeros(k_num)
  for i in range(k_num):
    for j in range(k_num):
      if i != j:
        p[i] += (float(u[i] @ u[j]) / norms[j] + float(u[j] @ u[i]) / norms[i]) / 2
  p /= max(k_num - 1, 1)
  z = p / np.maximum(losses, 1e-12)
  dominant = sorted(range(k_num), key=lambda i: (-z[i], i))[:math.ceil(ratio * k_num - 1e-9)]
  total = np.zeros_like(u[0])
  for i in range(k_num):
    g = u[i].copy()
    for s in dominant:
      if s != i:
        dot = g @ u[s]
        if dot < 0:
          g -= dot / (u[s] @ u[s]) * u[s]
    total += g
  return total / k_num


def _loop_fedld(u, w, ratio=0.8):
  # fedld paper eq. (5): eigenpairs of the K x K matrix of inner products (built with a loop of
  # dot products), v_z = U^T e_z built as d-vectors, eq. (6) orientation, eq. (7) projections.
  k_num = len(u)
  gram = np.zeros((k_num, k_num))
  for i in range(k_num):
    for j in range(i, k_num):
      gram[i, j] = gram[j, i] = float(u[i] @ u[j])
  eig, vecs = np.linalg.eigh(gram / k_num)
  eig, vecs = eig[::-1], vecs[:, ::-1]
  total_eig = float(np.trace(gram)) / k_num
  mean = u.mean(axis=0)
  w = w / w.sum()
  out = np.zeros_like(u[0])
  for l in range(max(1, math.floor(ratio * k_num + 1e-9))):
    v = np.zeros_like(u[0])
    for i in range(k_num):
      v += vecs[i, l].astype(u.dtype) * u[i]
    if v @ mean < 0:
      v = -v
    for i in range(k_num):
      norm_i = math.sqrt(float(u[i] @ u[i]))
      proj = (u[i] @ v) / (v @ v) * v
      norm_p = math.sqrt(float(proj @ proj))
      if norm_p > 0:
        out += w[i] * norm_i / norm_p * eig[l] / total_eig * proj
  return out


def _loop_corrective(u, d, losses, w, alpha=0.1):
  total = sum(d)
  norms = [math.sqrt(float(x @ x)) for x in d]
  m = [float(x @ total) for x in d]
  c = min(alpha * losses[i] / norms[i] for i in range(len(d)))
  denom = math.sqrt(sum((m[j] / norms[j]) ** 2 for j in range(len(d))))
  w = w / w.sum()
  out = sum(w[k] * u[k] for k in range(len(u)))
  for i in range(len(d)):
    out = out + (c / denom * m[i] / norms[i] ** 2) * d[i]
  return out


# ----------------------------------------------------------------------------- TF functions
def _functions(dim, dtype):
  stack = tf.TensorSpec([None, dim], dtype)
  vec = tf.TensorSpec([None], dtype)
  sig2 = [stack, vec]
  sig4 = [stack, stack, vec, vec]

  def mean(u, w):
    return tf.matmul(w[tf.newaxis, :] / tf.reduce_sum(w), u)[0]

  def floor(u, w):
    g = tf.matmul(u, u, transpose_b=True)
    c = w + tf.reduce_sum(g, axis=1) * 0   # the sum must depend on the Gram matrix
    return tf.matmul(c[tf.newaxis, :], u)[0]

  def floor2(u, d, l, w):
    g = tf.matmul(d, d, transpose_b=True)
    x = l + tf.reduce_sum(g, axis=1) * 0
    return tf.matmul(w[tf.newaxis, :], u)[0] + tf.matmul(x[tf.newaxis, :], d)[0]

  fns = {
      'weighted mean': (tf.function(mean, input_signature=sig2), 'uw'),
      'floor (Gram + 1 sum)': (tf.function(floor, input_signature=sig2), 'uw'),
      'floor2 (Gram D + 2 sums)': (tf.function(floor2, input_signature=sig4), 'udlw'),
      'harmonize': (tf.function(lambda u, w: conflict.harmonize(u, w, seed=1, validate=False),
                                input_signature=sig2), 'uw'),
      'harmonize+diag': (tf.function(
          lambda u, w: conflict.harmonize_with_diagnostics(u, w, seed=1, validate=False),
          input_signature=sig2), 'uw'),
      'dominant': (tf.function(lambda u, l: conflict.dominant_correction(u, l, validate=False),
                               input_signature=sig2), 'ul'),
      'dominant+diag': (tf.function(
          lambda u, l: conflict.dominant_correction_with_diagnostics(u, l, validate=False),
          input_signature=sig2), 'ul'),
      'principal': (tf.function(lambda u, w: conflict.principal_aggregate(u, w, validate=False),
                                input_signature=sig2), 'uw'),
      'principal+diag': (tf.function(
          lambda u, w: conflict.principal_aggregate_with_diagnostics(u, w, validate=False),
          input_signature=sig2), 'uw'),
      'corrective': (tf.function(
          lambda u, d, l, w: conflict.corrective_aggregate(u, d, l, w, validate=False),
          input_signature=sig4), 'udlw'),
      'corrective+diag': (tf.function(
          lambda u, d, l, w: conflict.corrective_aggregate_with_diagnostics(
              u, d, l, w, validate=False), input_signature=sig4), 'udlw'),
  }
  eager = {
      'harmonize': (lambda u, w: conflict.harmonize(u, w, seed=1), 'uw'),
      'harmonize+diag': (lambda u, w: conflict.harmonize_with_diagnostics(u, w, seed=1), 'uw'),
      'dominant': (lambda u, l: conflict.dominant_correction(u, l), 'ul'),
      'dominant+diag': (lambda u, l: conflict.dominant_correction_with_diagnostics(u, l), 'ul'),
      'principal': (lambda u, w: conflict.principal_aggregate(u, w), 'uw'),
      'principal+diag': (lambda u, w: conflict.principal_aggregate_with_diagnostics(u, w), 'uw'),
      'corrective': (lambda u, d, l, w: conflict.corrective_aggregate(u, d, l, w), 'udlw'),
      'corrective+diag': (lambda u, d, l, w: conflict.corrective_aggregate_with_diagnostics(
          u, d, l, w), 'udlw'),
  }
  for name, (fn, spec) in eager.items():
    fns[name + ' eager'] = (fn, spec)
    if not name.endswith('+diag'):
      fns[name + ' op-by-op'] = (_op_by_op(fn), spec)
  return fns


def _op_by_op(fn):
  """`fn` with every `tf.function` executed op by op (the eager kernels before dispatch)."""

  def run(*args):
    tf.config.run_functions_eagerly(True)
    try:
      return fn(*args)
    finally:
      tf.config.run_functions_eagerly(False)

  return run


_FLOOR_OF = {'harmonize': 'floor (Gram + 1 sum)', 'dominant': 'floor (Gram + 1 sum)',
             'principal': 'floor (Gram + 1 sum)', 'corrective': 'floor2 (Gram D + 2 sums)'}


def _time(fn, args):
  start = time.perf_counter()
  out = fn(*args)
  out = out[0] if isinstance(out, tuple) else out
  out.numpy()
  return time.perf_counter() - start


def bench(num_clients, dim, repeats, loop_limit, dtype=np.float32):
  """Prints and returns each kernel's median time and ratios to its floor at one K x d.

  Every variant is traced and warmed up first; repeats are interleaved (every variant once per
  repeat), so that load from other processes hits all alike. Asserts that the eager and op-by-op
  variants equal the graph one bitwise; the loop references run where K^2 d <= `loop_limit`.
  """
  rng = np.random.default_rng(0)
  centers = rng.normal(size=(3, dim)).astype(dtype)
  u_np = np.empty((num_clients, dim), dtype)
  d_np = np.empty((num_clients, dim), dtype)
  for k in range(num_clients):   # conflicting rows, built row by row (no K x d temporaries)
    # noise scales differ per row, so that FedLD's eigenvalues are well separated (with
    # near-equal eigenvalues its eq. (7) depends on the eigensolver's basis)
    noise = 0.3 + k / num_clients
    u_np[k] = (-1) ** k * centers[k % 3] + noise * rng.standard_normal(dim, dtype=np.float32)
    d_np[k] = (-1) ** (k // 2) * centers[(k + 1) % 3] + rng.standard_normal(dim,
                                                                             dtype=np.float32)
  weights = rng.uniform(1, 10, num_clients).astype(dtype)
  losses = rng.uniform(0.5, 2.0, num_clients).astype(dtype)
  u, d = tf.constant(u_np), tf.constant(d_np)
  w, l = tf.constant(weights), tf.constant(losses)
  values = {'u': u, 'd': d, 'w': w, 'l': l}
  fns = _functions(dim, tf.as_dtype(dtype))
  args = {name: tuple(values[c] for c in spec) for name, (_, spec) in fns.items()}
  results = {}
  for name, (fn, _) in fns.items():   # trace + warm up
    out = fn(*args[name])
    results[name] = (out[0] if isinstance(out, tuple) else out).numpy()
  times = {name: [] for name in fns}
  for _ in range(repeats):
    for name, (fn, _) in fns.items():
      times[name].append(_time(fn, args[name]))
  med = {name: statistics.median(t) for name, t in times.items()}

  loops = {}
  if num_clients * num_clients * dim <= loop_limit:
    orders = conflict.projection_order(num_clients, 'random', seed=1).numpy()
    refs = {'harmonize': lambda: _loop_fedgh(u_np, weights, orders),
            'dominant': lambda: _loop_dgc(u_np, losses),
            'principal': lambda: _loop_fedld(u_np, weights),
            'corrective': lambda: _loop_corrective(u_np, d_np, losses, weights)}
    for name, fn in refs.items():
      start = time.perf_counter()
      expected = fn()
      loops[name] = time.perf_counter() - start
      err = np.max(np.abs(results[name] - expected)) / max(np.max(np.abs(expected)), 1e-30)
      loops[name + ' err'] = err

  print(f'\nK = {num_clients}, d = {dim:.0e} ({np.dtype(dtype).name}), median of {repeats} '
        'interleaved repeats')
  print(f'  weighted mean {med["weighted mean"] * 1e3:8.1f} ms   floor (Gram + 1 sum) '
        f'{med["floor (Gram + 1 sum)"] * 1e3:8.1f} ms   floor2 (Gram D + 2 sums) '
        f'{med["floor2 (Gram D + 2 sums)"] * 1e3:8.1f} ms')
  print('  x floor: graph = inside tf.function, eager = called eagerly, +diag = the '
        '*_with_diagnostics companion, op-by-op = eager execution without graphs')
  print(f'  {"kernel":11s} {"ms":>7s} {"graph":>6s} {"+diag":>6s} {"eager":>6s} {"+diag":>6s} '
        f'{"op-by-op":>8s} {"x mean":>7s} {"loop ms":>8s} {"loop/kernel":>11s} {"rel err":>8s}')
  rows = []
  for name in ('harmonize', 'dominant', 'principal', 'corrective'):
    floor_t = med[_FLOOR_OF[name]]
    t, td = med[name], med[name + '+diag']
    te, ted, to = med[name + ' eager'], med[name + '+diag eager'], med[name + ' op-by-op']
    for variant in (name + ' eager', name + '+diag eager', name + ' op-by-op'):
      base = name + '+diag' if '+diag' in variant else name
      err = np.max(np.abs(results[variant] - results[base]))
      assert err == 0, f'{variant} differs from {base} by {err}'
    loop_t = loops.get(name)
    loop_s = f'{loop_t * 1e3:8.0f} {loop_t / t:11.1f} {loops[name + " err"]:8.1e}' if loop_t \
        else f'{"-":>8s} {"-":>11s} {"-":>8s}'
    print(f'  {name:11s} {t * 1e3:7.1f} {t / floor_t:6.2f} {td / floor_t:6.2f} '
          f'{te / floor_t:6.2f} {ted / floor_t:6.2f} {to / floor_t:8.2f} '
          f'{t / med["weighted mean"]:7.1f} {loop_s}')
    rows.append((name, t, t / floor_t, td / floor_t, te / floor_t, ted / floor_t, to / floor_t,
                 loop_t))
  sys.stdout.flush()
  return rows


_MEMORY_METHODS = ('weighted mean', 'floor (Gram + 1 sum)', 'floor2 (Gram D + 2 sums)',
                   'harmonize+diag', 'dominant+diag', 'principal+diag', 'corrective+diag')


def _memory_child(name, num_clients, dim):
  """Runs one method in this (fresh) process; prints the peak-RSS growth it caused, in MB."""
  import resource  # pylint: disable=g-import-not-at-top
  fns = _functions(dim, tf.float32)
  fn, spec = fns[name]
  values = {'u': tf.random.normal([num_clients, dim], seed=1),
            'd': tf.random.normal([num_clients, dim], seed=2),
            'w': tf.random.uniform([num_clients], 1, 2, seed=3),
            'l': tf.random.uniform([num_clients], 1, 2, seed=4)}
  tf.reduce_sum(values['u']).numpy()
  fns['weighted mean'][0](values['u'], values['w']).numpy()  # TF runtime warmed up
  before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  for _ in range(2):
    out = fn(*[values[c] for c in spec])
    (out[0] if isinstance(out, tuple) else out).numpy()
  after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  print(f'PEAK_GROWTH_MB {(after - before) / 1024:.1f}')


def memory(num_clients, dim):
  """Peak-RSS growth of each method, each in a fresh process, beside one [K, d] stack's size: a
  second K x d intermediate would show as about one more stack."""
  import subprocess  # pylint: disable=g-import-not-at-top
  stack_mb = num_clients * dim * 4 / 2**20
  print(f'\nmemory: K = {num_clients}, d = {dim:.0e} float32, one [K, d] stack = '
        f'{stack_mb:.0f} MB; peak RSS growth while running (fresh process each)')
  for name in _MEMORY_METHODS:
    out = subprocess.run(
        [sys.executable, '-m', 'perf.conflict_kernels', '--_memory_child', name,
         '--K', str(num_clients), '--d', str(dim)], capture_output=True, text=True, check=True)
    growth = [line.split()[1] for line in out.stdout.splitlines()
              if line.startswith('PEAK_GROWTH_MB')][0]
    print(f'  {name:26s} {float(growth):8.1f} MB  ({float(growth) / stack_mb:.2f} stacks)')
    sys.stdout.flush()


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--K', default='10,50,100', help='comma-separated numbers of clients')
  parser.add_argument('--d', default='1e5,1e6,4e6', help='comma-separated dimensions')
  parser.add_argument('--repeats', type=int, default=5)
  parser.add_argument('--loop_limit', type=float, default=2.6e9,
                      help='run the loop references only where K*K*d is at most this')
  parser.add_argument('--dtype', default='float32', choices=('float32', 'float64'))
  parser.add_argument('--quick', action='store_true', help='K=10, d=1e5, 3 repeats')
  parser.add_argument('--memory', action='store_true',
                      help='measure peak memory growth per method instead of time')
  parser.add_argument('--_memory_child', default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  runtime.set_local_context()   # project rule for binaries (no TFF computation runs here)
  if args._memory_child:  # pylint: disable=protected-access
    _memory_child(args._memory_child, int(args.K), int(float(args.d)))  # pylint: disable=protected-access
    return
  if args.quick:
    args.K, args.d, args.repeats = '10', '1e5', 3
  ks = [int(x) for x in args.K.split(',')]
  ds = [int(float(x)) for x in args.d.split(',')]
  print(f'conflict kernels benchmark: TF {tf.__version__}, {os.cpu_count()} CPUs, '
        f'{time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}')
  for dim in ds:
    for num_clients in ks:
      if args.memory:
        memory(num_clients, dim)
        continue
      bench(num_clients, dim, args.repeats, args.loop_limit, np.dtype(args.dtype).type)


if __name__ == '__main__':
  main()
