"""Fixtures of the experiment-binary tests: parsed absl flags, tiny federated data, subprocesses."""

import collections
import contextlib
import os
import re
import subprocess
import sys

from absl import flags
import numpy as np
import pytest

from experiments import config
from tests import conftest as root_conftest
from tff_conflict import runtime

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope='session', autouse=True)
def parsed_flags():
  """absl flags marked as parsed (pytest does not run app.run), defaults otherwise."""
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()


@contextlib.contextmanager
def flag_error(pattern: str):
  """Expects a `config.ConfigError` whose command-line message (what `cli.run` prints) matches
  the regular expression `pattern`, on one line."""
  with pytest.raises(config.ConfigError) as info:
    yield
  message = info.value.flag_message()
  assert re.search(pattern, message) and '\n' not in message, message


def non_timing(rows):
  """The metrics rows without their timing columns (what determinism and resume compare)."""
  return [{k: v for k, v in row.items() if k not in ('round_time_s', 'eval_time_s')}
          for row in rows]


def make_tiny_client_data(num_clients=4, examples_per_client=12, num_features=4, num_classes=3,
                          seed=0):
  """(train, test) TestClientData of linearly separable float32 features and int32 labels."""
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  centers = rng.normal(scale=3.0, size=(num_classes, num_features)).astype(np.float32)

  def client(n):
    y = rng.integers(0, num_classes, size=n).astype(np.int32)
    x = (centers[y] + rng.normal(size=(n, num_features))).astype(np.float32)
    return collections.OrderedDict(x=x, y=y)

  train = {f'c{k}': client(examples_per_client) for k in range(num_clients)}
  test = {'all': client(30)}
  return (tff.simulation.datasets.TestClientData(train),
          tff.simulation.datasets.TestClientData(test))


def _refusing_context():
  """A TFF execution context that fails every call."""
  from tensorflow_federated.python.core.impl.context_stack import context_base  # pylint: disable=g-import-not-at-top

  class RefusingContext(context_base.SyncContext):

    def invoke(self, comp, arg):
      del arg
      raise AssertionError('a TFF computation ran through TFF\'s execution context, which '
                           f'would start a worker_binary: {comp.type_signature}')

  return RefusingContext()


@pytest.fixture
def no_tff_runtime(monkeypatch):
  """TFF's execution context replaced by one that fails any call, also where a binary installs
  its context (`runtime.set_local_context`): for runs that must not use TFF's runtime, such as
  `--runtime=inprocess`, which starts no worker_binary. The session's local context is
  installed again afterwards."""
  from tensorflow_federated.python.core.impl.context_stack import context_stack_impl  # pylint: disable=g-import-not-at-top

  def refuse():
    context_stack_impl.context_stack.set_default_context(_refusing_context())

  refuse()
  monkeypatch.setattr(runtime, 'set_local_context', refuse)
  yield
  monkeypatch.undo()
  runtime.set_local_context()


@pytest.fixture
def ray_cluster(tmp_path_factory):
  """A two-node Ray cluster on the loopback (`ray_cluster.two_node_cluster`); the test fails if
  any of its processes outlives it."""
  from tests.experiments import ray_cluster as cluster_lib  # pylint: disable=g-import-not-at-top
  with cluster_lib.two_node_cluster(str(tmp_path_factory.mktemp('ray'))) as cluster:
    yield cluster


def workers_with_token(token):
  """Running worker_binary processes whose environment holds TFF_CONFLICT_TEST_TOKEN=token."""
  return runtime.workers_with_environment('TFF_CONFLICT_TEST_TOKEN', token)


def processes_with_token(token):
  """Every live process whose environment holds TFF_CONFLICT_TEST_TOKEN=token: a binary's worker
  processes, Ray's processes, TFF's worker_binary."""
  import psutil  # pylint: disable=g-import-not-at-top
  found = []
  for process in psutil.process_iter():
    try:
      if (process.environ().get('TFF_CONFLICT_TEST_TOKEN') == token
          and process.status() != psutil.STATUS_ZOMBIE):
        found.append(process.pid)
    except (psutil.Error, OSError):
      pass
  return found


def binary_env(token):
  return dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', TFF_CONFLICT_TEST_TOKEN=token)


def binary_command(module, *args):
  # SIGINT at its default action even when the suite runs as a background job (Ctrl-C tests).
  return root_conftest.with_default_sigint([sys.executable, '-m', module, *args])


def run_binary(module, *args, token, timeout=600):
  return subprocess.run(binary_command(module, *args), cwd=REPO_ROOT, env=binary_env(token),
                        capture_output=True, text=True, timeout=timeout)
