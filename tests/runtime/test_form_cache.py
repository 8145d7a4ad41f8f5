"""tff_conflict.runtime._form_cache: the in-process runner's compiled MapReduceForm, kept in
memory and on disk, never used for another computation, and recompiled over a bad entry."""

import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tensorflow_federated.python.core.impl.context_stack import context_stack_impl

from tests.conftest import make_tiny_client_datasets
from tests.conftest import make_tiny_keras_model
from tff_conflict.runtime import _form_cache
from tff_conflict.runtime import inprocess


def _fed_avg(seed=0):
  spec = make_tiny_client_datasets(num_clients=1)[0].element_spec

  def model_fn():
    return tff.learning.models.from_keras_model(
        make_tiny_keras_model(seed=seed),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), input_spec=spec)

  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, tff.learning.optimizers.build_sgdm(0.1))


@pytest.fixture(scope='module')
def fed_avg():
  return _fed_avg()


@pytest.fixture(autouse=True)
def no_forms_in_memory():
  _form_cache.clear_memory()
  yield
  _form_cache.clear_memory()


def _entries(directory):
  return sorted(name for name in os.listdir(directory) if name.endswith(_form_cache.SUFFIX))


def _round(runner):
  output = runner.next(runner.initialize(), make_tiny_client_datasets(num_clients=3))
  return tf.nest.flatten(output.state.global_model_weights.trainable)


def test_compiled_then_from_memory_then_from_disk_with_identical_rounds(fed_avg, tmp_path):
  compiled = inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  assert compiled.form_source == 'compiled'
  assert len(_entries(tmp_path)) == 1
  assert inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path)).form_source == 'memory'
  _form_cache.clear_memory()
  cached = inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  assert cached.form_source == 'disk'
  for a, b in zip(_round(compiled), _round(cached)):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize('damage', ['flip a payload byte', 'truncate', 'another key',
                                    'empty', 'garbage'])
def test_a_bad_entry_is_compiled_again_and_rewritten(fed_avg, tmp_path, damage):
  inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  [name] = _entries(tmp_path)
  path = tmp_path / name
  data = path.read_bytes()
  if damage == 'flip a payload byte':
    data = data[:-100] + bytes([data[-100] ^ 1]) + data[-99:]
  elif damage == 'truncate':
    data = data[:len(data) // 2]
  elif damage == 'another key':
    data = data.replace(name[:-len(_form_cache.SUFFIX)].encode(), b'0' * 64)
  elif damage == 'empty':
    data = b''
  else:
    data = os.urandom(1000)
  path.write_bytes(data)
  _form_cache.clear_memory()
  runner = inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  assert runner.form_source == 'compiled'
  assert path.read_bytes() != data
  _form_cache.clear_memory()
  assert inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path)).form_source == 'disk'


def test_an_entry_is_only_used_for_its_own_computation(fed_avg, tmp_path):
  inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  other = _fed_avg(seed=1)  # another initializer seed: another constant in `work`
  assert inprocess.InProcessRunner(other, compile_cache=str(tmp_path)).form_source == 'compiled'
  assert len(_entries(tmp_path)) == 2


def test_decode_refuses_another_type_signature(fed_avg, tmp_path):
  runner = inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  key = _entries(tmp_path)[0][:-len(_form_cache.SUFFIX)]
  data = _form_cache.encode(runner.map_reduce_form, key)
  assert _form_cache.decode(data, key, fed_avg.next.type_signature).type_signature == (
      fed_avg.next.type_signature)
  with pytest.raises(ValueError, match='type'):
    _form_cache.decode(data, key, fed_avg.initialize.type_signature)
  with pytest.raises(ValueError, match='not an entry'):
    _form_cache.decode(data, '1' * 64, fed_avg.next.type_signature)


def test_key_depends_on_the_compiler_options(fed_avg):
  proto = tff.framework.ConcreteComputation.get_proto(fed_avg.next)
  options = tf.compat.v1.ConfigProto()
  other = tf.compat.v1.ConfigProto()
  other.graph_options.rewrite_options.disable_meta_optimizer = True
  assert _form_cache.cache_key(proto, options) == _form_cache.cache_key(proto, options)
  assert _form_cache.cache_key(proto, options) != _form_cache.cache_key(proto, other)


def test_no_cache_compiles_every_time_and_writes_nothing(fed_avg, tmp_path, monkeypatch):
  monkeypatch.setenv(_form_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
  for _ in range(2):
    assert inprocess.InProcessRunner(fed_avg, compile_cache=False).form_source == 'compiled'
  assert not os.listdir(tmp_path)


def test_environment_variable_names_or_turns_off_the_directory(fed_avg, tmp_path, monkeypatch):
  monkeypatch.setenv(_form_cache.ENVIRONMENT_VARIABLE, str(tmp_path / 'here'))
  assert _form_cache.default_directory() == str(tmp_path / 'here')
  inprocess.InProcessRunner(fed_avg)
  assert len(_entries(tmp_path / 'here')) == 1
  for off in ('off', 'OFF', '0', 'false', 'no', ''):
    monkeypatch.setenv(_form_cache.ENVIRONMENT_VARIABLE, off)
    assert _form_cache.default_directory() is None
  _form_cache.clear_memory()
  assert inprocess.InProcessRunner(fed_avg).form_source == 'compiled'
  monkeypatch.delenv(_form_cache.ENVIRONMENT_VARIABLE)
  monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
  assert _form_cache.default_directory() == str(tmp_path / 'xdg' / 'tff_conflict' / 'mapreduce')


def test_a_directory_that_cannot_be_written_only_means_no_caching(fed_avg, tmp_path):
  blocker = tmp_path / 'a_file'
  blocker.write_text('not a directory')
  runner = inprocess.InProcessRunner(fed_avg, compile_cache=str(blocker / 'cache'))
  assert runner.form_source == 'compiled'
  assert len(_round(runner)) == 2


def test_least_recently_used_entries_and_stale_temporaries_are_removed(fed_avg, tmp_path,
                                                                        monkeypatch):
  monkeypatch.setattr(_form_cache, 'DISK_ENTRIES', 1)
  stale = tmp_path / '.0123456789abcdef-x.tmp'
  stale.write_bytes(b'left by a killed write')
  os.utime(stale, (0, 0))
  fresh = tmp_path / '.fedcba9876543210-y.tmp'
  fresh.write_bytes(b'being written now')
  inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  [first] = _entries(tmp_path)
  assert not stale.exists() and fresh.exists()
  inprocess.InProcessRunner(_fed_avg(seed=1), compile_cache=str(tmp_path))
  [second] = _entries(tmp_path)
  assert second != first


@pytest.mark.parametrize('value', [3, '', None, b'dir'])
def test_bad_compile_cache_argument(fed_avg, value):
  with pytest.raises(ValueError, match='compile_cache must be True, False or a directory'):
    inprocess.InProcessRunner(fed_avg, compile_cache=value)


@pytest.mark.parametrize('version', ['format', 'tensorflow', 'tensorflow_federated'])
def test_another_version_is_another_key_and_compiles_again(fed_avg, tmp_path, monkeypatch,
                                                           version):
  inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  [before] = _entries(tmp_path)
  if version == 'format':
    monkeypatch.setattr(_form_cache, 'FORMAT_VERSION', _form_cache.FORMAT_VERSION + 1)
  else:
    module = tf if version == 'tensorflow' else tff
    monkeypatch.setattr(module, '__version__', module.__version__ + '.other')
  _form_cache.clear_memory()
  runner = inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path))
  assert runner.form_source == 'compiled'
  assert before in _entries(tmp_path) and len(_entries(tmp_path)) == 2
  monkeypatch.undo()
  _form_cache.clear_memory()
  assert inprocess.InProcessRunner(fed_avg, compile_cache=str(tmp_path)).form_source == 'disk'


def test_a_form_found_in_memory_takes_the_asking_computations_python_containers(fed_avg):
  # The same proto without Python containers (as deserialized): the same key, another type.
  bare = tff.framework.ConcreteComputation(
      computation_proto=tff.framework.ConcreteComputation.get_proto(fed_avg.next),
      context_stack=context_stack_impl.context_stack)
  assert bare.type_signature != fed_avg.next.type_signature
  assert bare.type_signature.is_equivalent_to(fed_avg.next.type_signature)
  options = tf.compat.v1.ConfigProto()
  compile_fn = lambda: tff.backends.mapreduce.get_map_reduce_form_for_computation(  # pylint: disable=g-long-lambda
      fed_avg.next, options)
  form, source = _form_cache.compile_map_reduce_form(fed_avg.next, options, compile_fn, None)
  assert (source, form.type_signature) == ('compiled', fed_avg.next.type_signature)

  def must_not_compile():
    raise AssertionError('compiled although the form is in memory')

  for computation in (bare, fed_avg.next):
    form, source = _form_cache.compile_map_reduce_form(computation, options, must_not_compile,
                                                       None)
    assert source == 'memory'
    assert form.type_signature == computation.type_signature
