"""A two-node Ray cluster on this machine's loopback for tests (`two_node_cluster`), and the Ray
processes a test left behind (`leftover_ray_processes`)."""

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Iterator, Optional

import portpicker
import psutil

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Every process of a cluster started here carries MARKER_VARIABLE=<the cluster's marker> in its
# environment (Ray's processes inherit the environment of `ray start`), so that a test finds and
# stops its own cluster only, never another test's or another user's Ray on the same machine.
MARKER_VARIABLE = 'TFF_CONFLICT_RAY_MARKER'
# A loopback address other than 127.0.0.1: Ray replaces 127.0.0.1 and localhost (in
# `--node-ip-address` and in an address given to ray.init) with the machine's routable address.
NODE_IP = '127.0.0.2'
# Per node; Ray's default (30% of memory) would let each node claim gigabytes of /dev/shm.
OBJECT_STORE_BYTES = 100 * 2**20
_WAIT_SECONDS = 10.0
# What names a Ray process: (a piece of its name, True) or (a piece of its command line, False),
# as `ray stop` finds them (its own list is private to Ray).
RAY_PROCESSES = (
    ('raylet', True), ('plasma_store', True), ('monitor.py', False),
    ('ray.util.client.server', False), ('default_worker.py', False), ('setup_worker.py', False),
    ('ray::', True), ('log_monitor.py', False), ('dashboard/agent.py', False),
    ('dashboard/dashboard.py', False), ('runtime_env/agent/main.py', False),
    ('ray_process_reaper.py', False), ('gcs_server', True))


@dataclasses.dataclass(frozen=True)
class Cluster:
  """A running cluster: `ray.init(address=cluster.address)` connects a driver to it.

  Attributes:
    address: The head's GCS address, 'host:port'.
    marker: The value of MARKER_VARIABLE in the environment of each of its processes.
    temp_dir: Its Ray temporary directory (sessions, logs, sockets).
    start_seconds: Wall time `ray start` took for both nodes.
  """
  address: str
  marker: str
  temp_dir: str
  start_seconds: float


def ray_cli() -> str:
  """The `ray` command of this Python environment (beside `sys.executable`)."""
  return os.path.join(os.path.dirname(sys.executable), 'ray')


def _is_ray_process(proc: psutil.Process) -> bool:
  """Whether `proc` is a Ray daemon or worker, by the names `ray stop` uses."""
  name = proc.name()
  command = subprocess.list2cmdline(proc.cmdline())
  return any((keyword in name) if by_name else (keyword in command)
             for keyword, by_name in RAY_PROCESSES)


def leftover_ray_processes(marker: Optional[str] = None) -> list[psutil.Process]:
  """The running Ray processes (raylet, gcs_server, agents, monitors, `ray::` workers).

  Args:
    marker: If given, only those whose environment holds MARKER_VARIABLE=marker: a cluster's from
      `two_node_cluster`, or those of a driver started with that variable set (a local
      `ray.init()` passes its environment on to every process it starts). If None, every Ray
      process on the machine, also other users'.
  """
  found = []
  for proc in psutil.process_iter():
    try:
      if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
        continue
      if marker is not None and proc.environ().get(MARKER_VARIABLE) != marker:
        continue
      if _is_ray_process(proc):
        found.append(proc)
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
      pass
  return found


def _describe(proc: psutil.Process) -> str:
  try:
    return f'{proc.pid} {subprocess.list2cmdline(proc.cmdline())[:120]}'
  except psutil.Error:
    return f'{proc.pid} (gone)'


def _name(proc: psutil.Process) -> str:
  try:
    return proc.name()
  except psutil.Error:
    return ''


def _kill(procs) -> None:
  for proc in procs:
    with contextlib.suppress(psutil.NoSuchProcess):
      proc.send_signal(signal.SIGKILL)
  psutil.wait_procs(procs, timeout=_WAIT_SECONDS)


def stop_cluster(marker: str) -> list[str]:
  """Ends every process of the cluster marked `marker`, as `ray stop --force` would (SIGKILL,
  raylets first, so that no new worker starts), then looks again.

  `ray stop` itself is not used: it ends every Ray process on the machine, other tests' too.

  Returns:
    The processes still found after the stop (described by PID and command line), which were
    then killed too: empty when the stop left nothing behind.
  """
  _kill([p for p in leftover_ray_processes(marker) if _name(p) == 'raylet'])
  # gcs_server last, as `ray stop` orders them.
  _kill(sorted(leftover_ray_processes(marker), key=lambda p: _name(p) == 'gcs_server'))
  time.sleep(0.5)
  survivors = leftover_ray_processes(marker)
  described = [_describe(p) for p in survivors]
  _kill(survivors)
  return described


@contextlib.contextmanager
def short_path(temp_dir: str) -> Iterator[str]:
  """A short link in /tmp to `temp_dir`, removed on exit: a Ray temporary directory (`ray start
  --temp-dir`, `ray.init(_temp_dir=...)`) for which a pytest tmp path is too long (Ray's socket
  paths under it are limited to 107 bytes)."""
  link = os.path.join('/tmp', f'ray-{uuid.uuid4().hex[:8]}')
  os.symlink(os.path.abspath(temp_dir), link)
  try:
    yield link
  finally:
    os.unlink(link)


def _ray_start(args: list[str], env: dict[str, str]) -> None:
  result = subprocess.run([ray_cli(), 'start', *args], env=env, capture_output=True, text=True,
                          timeout=180, check=False)
  if result.returncode != 0:
    raise RuntimeError(f'`ray start {" ".join(args)}` failed ({result.returncode}):\n'
                       f'{result.stdout[-2000:]}\n{result.stderr[-2000:]}')


def start_two_node_cluster(temp_dir: str, num_cpus: int = 1) -> Cluster:
  """Starts a head node and a second node, each with `num_cpus` CPUs, on NODE_IP.

  The dashboard is off; every port is picked free. Workers import this checkout's
  `tff_conflict` and `experiments`: its root leads their PYTHONPATH. Ray puts its sockets under
  `temp_dir`, whose path must stay short (a Unix socket's path has at most 107 bytes).
  """
  marker = uuid.uuid4().hex
  python_path = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get('PYTHONPATH')) if p)
  env = dict(os.environ, PYTHONPATH=python_path, RAY_USAGE_STATS_ENABLED='0',
             **{MARKER_VARIABLE: marker})
  env.pop('RAY_ADDRESS', None)
  port = portpicker.pick_unused_port()
  common = [f'--num-cpus={num_cpus}', '--num-gpus=0', f'--node-ip-address={NODE_IP}',
            f'--object-store-memory={OBJECT_STORE_BYTES}', '--disable-usage-stats']
  start = time.monotonic()
  try:
    _ray_start(['--head', f'--port={port}', f'--temp-dir={temp_dir}',
                '--include-dashboard=false',
                f'--dashboard-port={portpicker.pick_unused_port()}',
                f'--ray-client-server-port={portpicker.pick_unused_port()}', *common], env)
    _ray_start([f'--address={NODE_IP}:{port}', *common], env)
  except BaseException:
    stop_cluster(marker)
    raise
  return Cluster(address=f'{NODE_IP}:{port}', marker=marker, temp_dir=temp_dir,
                 start_seconds=time.monotonic() - start)


@contextlib.contextmanager
def two_node_cluster(temp_dir: str, num_cpus: int = 1) -> Iterator[Cluster]:
  """A cluster of `start_two_node_cluster` for the `with` block, its files in `temp_dir`.

  Ray is given `short_path(temp_dir)`. On exit a connected driver is shut down (`ray.shutdown()`)
  and the cluster stopped (`stop_cluster`); raises AssertionError if any of its processes outlived
  that.
  """
  with short_path(temp_dir) as ray_temp_dir:
    cluster = start_two_node_cluster(ray_temp_dir, num_cpus)
    try:
      yield cluster
    finally:
      import ray  # pylint: disable=g-import-not-at-top
      ray.shutdown()
      survivors = stop_cluster(cluster.marker)
      assert not survivors, f'Ray processes outlived the cluster stop (killed now): {survivors}'
