"""Flags shared by the experiment binaries, declared in recorded groups.

As in google-research/federated (`utils/utils_impl.record_hparam_flags`), flags are declared at
module level inside `record_group(name)`, which remembers which flags belong to which group, so
that `hparams()` can write every flag the experiment depends on, group by group. Families share a
prefix: `--client_*` (local training), `--server_*` (server optimizer).

Groups declared here (imported by `experiments.train` and `experiments.compare`):
  data       --dataset, --num_clients, --alpha, --data_seed, --cache_dir, --data_dir,
             --emnist_only_digits, --synthetic_alpha, --synthetic_beta, --leaf_dir, --leaf_name
  model      --model
  training   --rounds, --clients_per_round, --client_epochs, --client_batch_size,
             --client_shuffle_buffer, --eval_every, --checkpoint_every, --keep_checkpoints
  client     --client_optimizer, --client_learning_rate, --client_momentum, --client_weighting
  server     --server_optimizer, --server_learning_rate, --server_momentum
  method     each method's hyperparameters: defaults, ranges and help from
             `tff_conflict.hparams`, checked when the flags are parsed
  output     --output_dir, --experiment_name, --resume, --progress
  runtime    --runtime, --workers

`check_common_flags()` holds the cross-flag checks both binaries run in `main`.
"""

import contextlib
import platform
import subprocess
import os
from typing import Any, Iterator, Sequence

from absl import app
from absl import flags

from tff_conflict import hparams as hparams_lib

FLAGS = flags.FLAGS
_GROUPS: dict[str, list[str]] = {}


@contextlib.contextmanager
def record_group(group: str) -> Iterator[None]:
  """Records the flags defined inside the block as members of `group`."""
  before = set(FLAGS)
  yield
  names = _GROUPS.setdefault(group, [])
  # FLAGS iterates over long and short names; keep the long ones, in definition order.
  for name in FLAGS:
    if name not in before and name not in names and FLAGS[name].name == name:
      names.append(name)


def groups() -> dict[str, list[str]]:
  """group -> flag names, for every recorded group."""
  return {g: list(names) for g, names in _GROUPS.items()}


DATASETS = ('digits', 'emnist', 'synthetic', 'mnist', 'fashion_mnist', 'cifar10', 'cifar100',
            'leaf')
OPTIMIZERS = ('sgd', 'adam', 'adagrad', 'rmsprop', 'yogi')

with record_group('data'):
  flags.DEFINE_enum('dataset', 'digits', DATASETS,
                    'Federated dataset. digits: scikit-learn digits split by Dirichlet label skew '
                    '(offline); emnist: TFF federated EMNIST by writer; synthetic: LEAF '
                    'Synthetic(alpha, beta); mnist/fashion_mnist/cifar10/cifar100: Dirichlet '
                    'label-skew splits of the tensorflow-datasets data; leaf: LEAF\'s FEMNIST, '
                    'Synthetic or CelebA from the JSON files of LEAF\'s preprocess.sh '
                    '(--leaf_dir).')
  flags.DEFINE_integer('num_clients', None,
                       'Clients in the population. Default: the dataset\'s (digits 20, synthetic '
                       '30, tfds datasets 100, emnist and leaf every writer or user). For emnist '
                       'and leaf, the first N writers or users (sorted ids).', lower_bound=1)
  flags.DEFINE_float('alpha', 0.1, 'Dirichlet concentration of the label-skew split (digits and '
                     'tfds datasets); smaller is more skewed.')
  flags.DEFINE_integer('data_seed', 0, 'Seed of the data partition (and of Synthetic\'s '
                       'generative process). Kept apart from --seed so that runs with several '
                       'seeds share the same data.')
  flags.DEFINE_string('cache_dir', None, 'emnist: directory holding emnist_all.sqlite. leaf: '
                      'where to keep the converted cache (default: next to the data).')
  flags.DEFINE_string('data_dir', None, 'tfds datasets: tensorflow-datasets data_dir.')
  flags.DEFINE_bool('emnist_only_digits', False, 'emnist: the 10-class digits-only version.')
  flags.DEFINE_float('synthetic_alpha', 1.0, 'synthetic: LEAF alpha (model heterogeneity).')
  flags.DEFINE_float('synthetic_beta', 1.0, 'synthetic: LEAF beta (data heterogeneity).')
  flags.DEFINE_string('leaf_dir', None, 'leaf: LEAF\'s dataset folder data/<name> (holding '
                      'data/train/*.json and data/test/*.json), or its data/ folder. Converted '
                      'once into a cache; the splits are the files\' own.')
  flags.DEFINE_enum('leaf_name', None, ['femnist', 'synthetic', 'celeba'], 'leaf: which LEAF '
                    'dataset --leaf_dir holds. Default: the name of its folder.')

with record_group('model'):
  flags.DEFINE_string('model', None,
                      'Model (experiments.models.MODELS). Default per dataset: digits_cnn for '
                      'digits, emnist_cnn for emnist, logistic_regression for synthetic, '
                      'fedavg_cnn for mnist/fashion_mnist, cifar_cnn for cifar10/cifar100; for '
                      'leaf, LEAF\'s models: leaf_femnist_cnn, logistic_regression for '
                      'Synthetic, leaf_celeba_cnn.')

with record_group('training'):
  flags.DEFINE_integer('rounds', 50, 'Federated rounds.', lower_bound=1)
  flags.DEFINE_integer('clients_per_round', 10, 'Clients sampled per round (without '
                       'replacement; the sample of round r depends only on --seed and r).',
                       lower_bound=1)
  flags.DEFINE_integer('client_epochs', 1, 'Local epochs per round.', lower_bound=1)
  flags.DEFINE_integer('client_batch_size', 20, 'Local batch size.', lower_bound=1)
  flags.DEFINE_integer('client_shuffle_buffer', 1000, 'Shuffle buffer of each client dataset '
                       '(0: no shuffling). The shuffle seed is derived from --seed, the round '
                       'and the client.', lower_bound=0)
  flags.DEFINE_integer('eval_every', 1, 'Evaluate the global model on the test split every N '
                       'rounds (and after the last round); 0: only after the last round.',
                       lower_bound=0)
  flags.DEFINE_integer('checkpoint_every', 10, 'Save the server state every N rounds (and after '
                       'the last round); 0: never.', lower_bound=0)
  flags.DEFINE_integer('keep_checkpoints', 3, 'Checkpoints to keep; 0 keeps all.', lower_bound=0)

# `--batch_size` is another name of `--client_batch_size`.
flags.DEFINE_alias('batch_size', 'client_batch_size')

with record_group('client'):
  flags.DEFINE_enum('client_optimizer', 'sgd', OPTIMIZERS, 'Client optimizer '
                    '(tff.learning.optimizers).')
  flags.DEFINE_float('client_learning_rate', 0.05, 'Client learning rate.')
  flags.DEFINE_float('client_momentum', 0.0, 'Client momentum (sgd only).')
  flags.DEFINE_enum('client_weighting', None, ['num_examples', 'uniform', 'loss'],
                    'Client weighting of the aggregate. Default: the method\'s own (FedMGC: '
                    'loss, others: num_examples).')

with record_group('server'):
  flags.DEFINE_enum('server_optimizer', 'sgd', OPTIMIZERS, 'Server optimizer; the aggregate '
                    'delta is applied as its gradient.')
  flags.DEFINE_float('server_learning_rate', 1.0, 'Server learning rate.')
  flags.DEFINE_float('server_momentum', 0.0, 'Server momentum (sgd only).')


def _method_flag_help(hparam, extra: str = '') -> str:
  """Help text of a method flag: what it does, its range (tff_conflict.hparams)."""
  return (f'{hparam.method} {hparam.component}: {hparam.description}{extra} Must be '
          f'{hparam.valid_range}.')


def _register_hparam_validator(hparam) -> None:
  """A parse-time check of `--<flag>` by `hparam.check`, e.g. `--focal_gamma must be a finite
  number >= 0, got nan`."""
  def check(value):
    try:
      hparam.check(value, name=f'--{hparam.flag}')
    except ValueError as e:
      raise flags.ValidationError(str(e)) from e
    return True
  flags.register_validator(hparam.flag, check)


# Each method hyperparameter's default, range and description come from tff_conflict.hparams.
_METHOD_FLAG_EXTRA_HELP = {
    'proximal_strength': ' Used by fedprox; with --algorithm=custom the proximal term is added '
                         'only when this flag is given.',
    'fedgh_order': ' The seed is --seed.',
}
METHOD_HPARAMS = tuple(h for h in hparams_lib.HPARAMS
                       if h.flag is not None and h.flag != 'seed')

with record_group('method'):
  for _hparam in METHOD_HPARAMS:
    _help = _method_flag_help(_hparam, _METHOD_FLAG_EXTRA_HELP.get(_hparam.flag, ''))
    if _hparam.kind == hparams_lib.CHOICE:
      flags.DEFINE_enum(_hparam.flag, _hparam.default, list(_hparam.choices), _help)
    else:
      flags.DEFINE_float(_hparam.flag, _hparam.default, _help)
    _register_hparam_validator(_hparam)

with record_group('output'):
  flags.DEFINE_string('output_dir', 'results', 'Root of the outputs; each experiment writes '
                      'under <output_dir>/<experiment_name>/.')
  flags.DEFINE_string('experiment_name', None, 'Name of the experiment directory. Default: '
                      'derived from the algorithm(s) and dataset.')
  flags.DEFINE_bool('resume', True, 'Continue from the latest checkpoint of an earlier run of '
                    'the same experiment; --noresume starts over (deleting its old outputs).')
  flags.DEFINE_bool('progress', True, 'Show a progress bar (plain lines when stdout is not a '
                    'terminal).')

with record_group('runtime'):
  flags.DEFINE_enum('runtime', 'cpp', ['cpp', 'inprocess'], 'Execution backend: cpp (TFF\'s '
                    'local worker_binary) or inprocess (tff_conflict.runtime\'s in-process '
                    'runner of the MapReduceForm graphs).')
  flags.DEFINE_list('workers', [], 'host:port of remote TFF workers (worker_binary) to run on; '
                    'empty: local.')

# The flags each dataset reads besides --num_clients and --data_seed.
DATASET_FLAGS = {
    'digits': ('alpha',),
    'emnist': ('cache_dir', 'emnist_only_digits'),
    'synthetic': ('synthetic_alpha', 'synthetic_beta'),
    'mnist': ('alpha', 'data_dir'),
    'fashion_mnist': ('alpha', 'data_dir'),
    'cifar10': ('alpha', 'data_dir'),
    'cifar100': ('alpha', 'data_dir'),
    'leaf': ('leaf_dir', 'leaf_name', 'cache_dir'),
}
_ALL_DATASET_FLAGS = sorted({f for names in DATASET_FLAGS.values() for f in names})


def check_common_flags() -> None:
  """Cross-flag checks shared by the binaries; raises `app.UsageError` with a clear message."""
  for prefix in ('client', 'server'):
    lr = FLAGS[f'{prefix}_learning_rate'].value
    if not lr > 0:
      raise app.UsageError(f'--{prefix}_learning_rate must be > 0, got {lr}')
    momentum = FLAGS[f'{prefix}_momentum'].value
    if not 0 <= momentum < 1:
      raise app.UsageError(f'--{prefix}_momentum must be in [0, 1), got {momentum}')
    if momentum and FLAGS[f'{prefix}_optimizer'].value != 'sgd':
      raise app.UsageError(f'--{prefix}_momentum applies only to --{prefix}_optimizer=sgd, got '
                           f'--{prefix}_optimizer={FLAGS[f"{prefix}_optimizer"].value}')
  dataset = FLAGS.dataset
  for name in _ALL_DATASET_FLAGS:
    if FLAGS[name].present and name not in DATASET_FLAGS[dataset]:
      users = sorted(d for d, names in DATASET_FLAGS.items() if name in names)
      raise app.UsageError(f'--{name} applies only to --dataset in {users}, not '
                           f'--dataset={dataset}')
  if dataset == 'leaf' and not FLAGS.leaf_dir:
    raise app.UsageError('--dataset=leaf needs --leaf_dir (LEAF\'s dataset folder data/<name>)')
  if FLAGS.alpha <= 0:
    raise app.UsageError(f'--alpha must be > 0, got {FLAGS.alpha}')
  if FLAGS.num_clients is not None and FLAGS.clients_per_round > FLAGS.num_clients:
    raise app.UsageError(f'--clients_per_round={FLAGS.clients_per_round} is larger than the '
                         f'population --num_clients={FLAGS.num_clients}')
  if FLAGS.eval_every > FLAGS.rounds:
    raise app.UsageError(f'--eval_every={FLAGS.eval_every} is larger than --rounds='
                         f'{FLAGS.rounds}: use 0 to evaluate only after the last round')
  if FLAGS.workers and FLAGS.runtime != 'cpp':
    raise app.UsageError(f'--workers runs on TFF\'s remote workers (the cpp runtime) and cannot '
                         f'be combined with --runtime={FLAGS.runtime}')
  for address in FLAGS.workers:
    host, _, port = address.rpartition(':')
    if not host or not port.isdigit():
      raise app.UsageError(f'--workers entries must be host:port, got {address!r}')
  if FLAGS.experiment_name is not None and (
      not FLAGS.experiment_name or os.path.isabs(FLAGS.experiment_name)
      or '..' in FLAGS.experiment_name.split(os.sep)):
    raise app.UsageError(f'--experiment_name must be a relative name without "..", got '
                         f'{FLAGS.experiment_name!r}')


def _package_versions() -> dict[str, str]:
  import importlib.metadata  # pylint: disable=g-import-not-at-top
  versions = {'python': platform.python_version()}
  for package in ('tensorflow', 'tensorflow-federated', 'numpy', 'absl-py', 'scikit-learn',
                  'tensorflow-datasets'):
    try:
      versions[package] = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
      versions[package] = 'not installed'
  import tff_conflict  # pylint: disable=g-import-not-at-top
  versions['tff_conflict'] = tff_conflict.__version__
  return versions


def _git_commit() -> str:
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    out = subprocess.run(['git', 'rev-parse', 'HEAD'], cwd=root, capture_output=True, text=True,
                         timeout=5, check=False)
  except (OSError, subprocess.SubprocessError):
    return ''
  return out.stdout.strip() if out.returncode == 0 else ''


COMMON_GROUPS = ('data', 'model', 'training', 'client', 'server', 'method', 'output', 'runtime')


def hparams(groups: Sequence[str] = COMMON_GROUPS, **extra: Any) -> dict[str, Any]:
  """The values of the flags of `groups` (in order), then `extra`, package versions and the git
  commit."""
  values: dict[str, Any] = {}
  for group in groups:
    for name in _GROUPS[group]:
      values[name] = FLAGS[name].value
  values.update(extra)
  for package, version in _package_versions().items():
    values[f'version/{package}'] = version
  values['git_commit'] = _git_commit()
  return values


def quiet_logs() -> None:
  """Silences TF, TFF and absl log noise unless `--verbosity` was given.

  TF's C++ logs are quieted by `TF_CPP_MIN_LOG_LEVEL=2`, which the binaries set before importing
  TensorFlow; this lowers absl's and TF's Python loggers to warnings and drops Python warnings
  raised inside TensorFlow, TFF and Keras (deprecations).
  """
  import logging as std_logging  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  from absl import logging  # pylint: disable=g-import-not-at-top
  if FLAGS['verbosity'].present:
    return
  logging.set_verbosity(logging.WARNING)
  for name in ('tensorflow', 'tensorflow_federated', 'h5py', 'matplotlib'):
    std_logging.getLogger(name).setLevel(std_logging.ERROR)
  for module in ('tensorflow', 'tensorflow_federated', 'keras', 'jax', 'tree'):
    warnings.filterwarnings('ignore', module=module)
