"""tests/experiments/ray_cluster.py: a two-node Ray cluster on the loopback runs TensorFlow tasks on
both nodes and leaves no process behind; a local `ray.init()` leaves none after any ending but
SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

from google.protobuf.internal import api_implementation
import numpy as np
import psutil
import pytest

from tests import conftest
from tests.experiments import ray_cluster as cluster_lib

_SLEEP = 'import time; time.sleep(120)'


def _tff_sum(values):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
  def total(x):
    return tff.federated_sum(x)

  return float(total(values))


def _spawn(marker, *argv):
  """A sleeping Python process with `argv` and the marker, once it runs (exec done)."""
  env = dict(os.environ, **{cluster_lib.MARKER_VARIABLE: marker})
  proc = subprocess.Popen([sys.executable, '-c', _SLEEP, *argv], env=env)
  deadline = time.monotonic() + 10
  while _SLEEP not in psutil.Process(proc.pid).cmdline() and time.monotonic() < deadline:
    time.sleep(0.01)
  return proc


def test_leftover_ray_processes_finds_the_marked_ray_processes_only():
  marker, other = uuid.uuid4().hex, uuid.uuid4().hex
  # Processes whose command line names a Ray worker script, as `ray stop` recognizes one.
  ray_like = _spawn(marker, 'default_worker.py')
  not_ray = _spawn(marker, 'something_else.py')
  other_ray_like = _spawn(other, 'default_worker.py')
  try:
    assert [p.pid for p in cluster_lib.leftover_ray_processes(marker)] == [ray_like.pid]
    everywhere = {p.pid for p in cluster_lib.leftover_ray_processes()}
    assert {ray_like.pid, other_ray_like.pid} <= everywhere and not_ray.pid not in everywhere

    assert cluster_lib.stop_cluster(marker) == []
    assert ray_like.poll() is not None   # killed (and reaped by the stop's wait)
    assert not_ray.poll() is None and other_ray_like.poll() is None
    assert cluster_lib.leftover_ray_processes(marker) == []
  finally:
    for proc in (ray_like, not_ray, other_ray_like):
      proc.kill()
      proc.wait()


@pytest.mark.slow
def test_two_node_cluster_runs_tensorflow_tasks_on_both_nodes_and_leaves_nothing(ray_cluster):
  import ray  # pylint: disable=g-import-not-at-top
  cluster = ray_cluster
  running = {p.pid: p.name() for p in cluster_lib.leftover_ray_processes(cluster.marker)}
  assert sorted(n for n in running.values() if n in ('raylet', 'gcs_server')) == [
      'gcs_server', 'raylet', 'raylet'], running

  ray.init(address=cluster.address, log_to_driver=False)
  nodes = [n for n in ray.nodes() if n['Alive']]
  assert len(nodes) == 2 and all(n['NodeManagerAddress'] == cluster_lib.NODE_IP
                                 for n in nodes)

  @ray.remote(num_cpus=1, scheduling_strategy='SPREAD')
  def tf_task(x):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from google.protobuf.internal import api_implementation  # pylint: disable=g-import-not-at-top
    import experiments  # pylint: disable=g-import-not-at-top,unused-import
    import tff_conflict  # pylint: disable=g-import-not-at-top,unused-import
    return dict(pid=os.getpid(), node=ray.get_runtime_context().get_node_id(),
                value=float(tf.reduce_sum(tf.constant([x, 1.0]))),
                protobuf=api_implementation.Type(),
                files=(experiments.__file__, tff_conflict.__file__))

  results = ray.get([tf_task.remote(float(k)) for k in range(4)])
  assert [r['value'] for r in results] == [1.0, 2.0, 3.0, 4.0]
  # Ray's own gRPC and protobuf leave TensorFlow's and TFF's alone, in workers and in this driver.
  assert {r['protobuf'] for r in results} == {'upb'}
  assert _tff_sum([1.0, 2.0]) == 3.0
  assert api_implementation.Type() == 'upb'
  assert {r['node'] for r in results} == {n['NodeID'] for n in nodes}
  repo = cluster_lib.REPO_ROOT + os.sep
  assert all(f.startswith(repo) for r in results for f in r['files']), results[0]['files']
  worker_pids = {r['pid'] for r in results}
  # The workers carry the cluster's marker: the check after the stop would see any of them.
  marked = {p.pid for p in cluster_lib.leftover_ray_processes(cluster.marker)}
  assert worker_pids <= marked

  ray.shutdown()
  assert cluster_lib.stop_cluster(cluster.marker) == []
  assert cluster_lib.leftover_ray_processes(cluster.marker) == []
  assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                 for pid in worker_pids | set(running))


# A driver with a local Ray instance (two workers started), then ended as argv[1]
# says.
_DRIVER = textwrap.dedent('''
    import sys, time
    import ray
    ray.init(address='local', num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=sys.argv[2])

    @ray.remote
    def pid():
      import os
      return os.getpid()

    print('WORKERS', *ray.get([pid.remote(), pid.remote()]), flush=True)
    if sys.argv[1] == 'shutdown':
      ray.shutdown()
    else:
      time.sleep(600)
''')


@pytest.mark.slow
@pytest.mark.parametrize('ending', ['shutdown', signal.SIGTERM, signal.SIGINT])
def test_a_local_ray_instance_ends_with_its_driver(ending, tmp_path_factory):
  marker = uuid.uuid4().hex
  env = dict(os.environ, PYTHONPATH=cluster_lib.REPO_ROOT, **{cluster_lib.MARKER_VARIABLE: marker})
  with cluster_lib.short_path(tmp_path_factory.mktemp('ray')) as temp_dir:
    argv = [sys.executable, '-c', _DRIVER, str(ending), temp_dir]
    driver = subprocess.Popen(conftest.with_default_sigint(argv), stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env,
                              start_new_session=True)
    try:
      line = driver.stdout.readline()
      assert line.startswith('WORKERS'), line
      started = cluster_lib.leftover_ray_processes(marker)
      assert {int(pid) for pid in line.split()[1:]} <= {p.pid for p in started}
      if ending != 'shutdown':
        driver.send_signal(ending)
      driver.wait(timeout=60)
      assert cluster_lib.leftover_ray_processes(marker) == []
    finally:
      driver.kill()
      driver.wait()
      cluster_lib.stop_cluster(marker)
