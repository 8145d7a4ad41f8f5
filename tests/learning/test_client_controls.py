"""`ClientControls`: a round's inputs, keeping the new controls by slot, refusing what would
corrupt them, the version a training loop saves, save and restore (NumPy only, no TFF)."""

import collections

import numpy as np
import pytest

from tff_conflict.learning import ClientControls

Output = collections.namedtuple('Output', ['state', 'metrics'])


def _round(store, client_ids, slots, controls, **kwargs):
  """`store.update` of a round whose input `for_cohort(client_ids, ...)` built."""
  store.for_cohort(client_ids, [None] * len(client_ids))
  return store.update(client_ids, _output(slots, controls), **kwargs)


def _output(slots, controls, **metrics):
  metrics['client_controls'] = collections.OrderedDict(
      slot=np.asarray(slots, np.int32), control=np.asarray(controls, np.float32))
  return Output(state=None, metrics=collections.OrderedDict(metrics))


def test_a_round_gives_each_client_its_control_and_keeps_the_new_ones_by_slot():
  store = ClientControls(['a', 'b', 'c', 'd'], 2)
  inputs = store.for_cohort(['c', 'a'], ['data_c', 'data_a'])
  assert [list(i) for i in inputs] == [['data', 'control', 'slot']] * 2
  assert [i['data'] for i in inputs] == ['data_c', 'data_a']
  assert [int(i['slot']) for i in inputs] == [0, 1]
  np.testing.assert_array_equal(inputs[0]['control'], [0.0, 0.0])
  # Rows may come in any order: the slot says whose control it is.
  metrics = store.update(['c', 'a'], _output([1, 0], [[1.0, 2.0], [3.0, 4.0]], train=1.5))
  assert metrics == collections.OrderedDict(train=1.5)
  np.testing.assert_array_equal(store.control('a'), [1.0, 2.0])
  np.testing.assert_array_equal(store.control('c'), [3.0, 4.0])
  assert store.has_participated('a') and not store.has_participated('b')
  # 'a' leaves, comes back with its control; 'b' is new (zeros); a missing row keeps its value.
  inputs = store.for_cohort(['b', 'a'], ['data_b', 'data_a'])
  np.testing.assert_array_equal(inputs[0]['control'], [0.0, 0.0])
  np.testing.assert_array_equal(inputs[1]['control'], [1.0, 2.0])
  store.update(['b', 'a'], _output([0], [[5.0, 6.0]]))
  np.testing.assert_array_equal(store.control('b'), [5.0, 6.0])
  np.testing.assert_array_equal(store.control('a'), [1.0, 2.0])
  assert store.version == 2
  # The inputs are copies: changing them leaves the store alone.
  inputs[1]['control'][:] = 9.0
  np.testing.assert_array_equal(store.control('a'), [1.0, 2.0])


@pytest.mark.parametrize('call,message', [
    (lambda s: s.for_cohort(['a', 'a'], [1, 2]), r"client_ids must be distinct within a round, "
     r"got 'a' twice"),
    (lambda s: s.for_cohort(['z'], [1]), r"client_ids: 'z' is not one of the 3 clients"),
    (lambda s: s.for_cohort(['a', 'b'], [1]), r'one dataset per client: 2 client_ids, 1'),
    (lambda s: s.for_cohort('ab', [1, 2]), r'client_ids must be a list'),
    (lambda s: s.update(['a'], Output(None, {'train': 1})), r"holds no 'client_controls'"),
    (lambda s: s.update(['a'], _output([1], [[1.0, 2.0]])), r'slots \[1\] do not match the 1'),
    (lambda s: _round(s, ['a', 'b'], [0, 0], [[1.0, 2], [3, 4]]), r'do not match'),
    (lambda s: s.update(['a'], _output([0], [[1.0, 2.0, 3.0]])), r'shape \(1, 3\), expected'),
    (lambda s: s.update(['a'], _output([0], [[np.nan, 2.0]])), r'non-finite client controls'),
    (lambda s: s.control('q'), r"client_id: 'q' is not one"),
])
def test_what_would_corrupt_the_controls_is_refused_and_changes_nothing(call, message):
  store = ClientControls(['a', 'b', 'c'], 2)
  _round(store, ['a'], [0], [[1.0, 2.0]])
  store.for_cohort(['a'], [None])   # the round the call's output belongs to
  before = {k: np.array(v, copy=True) for k, v in store.arrays().items()}
  with pytest.raises(ValueError, match=message):
    call(store)
  for key, value in store.arrays().items():
    np.testing.assert_array_equal(value, before[key])


@pytest.mark.parametrize('args,message', [
    (([], 2), 'at least one client'), ((['a', 'a'], 2), "distinct, got 'a' twice"),
    ((['a'], 0), 'size must be an integer >= 1, got 0'), ((['a'], True), 'size must be'),
])
def test_bad_constructor_arguments(args, message):
  with pytest.raises(ValueError, match=message):
    ClientControls(*args)


def test_arrays_of_the_version_before_the_last_update_undo_it():
  store = ClientControls(['a', 'b'], 1)
  _round(store, ['a'], [0], [[1.0]], version=3)
  _round(store, ['a', 'b'], [0, 1], [[2.0], [7.0]], version=4)
  current = store.arrays(version=4)
  assert int(current['version']) == 4
  np.testing.assert_array_equal(current['controls'], [[2.0], [7.0]])
  # A loop interrupted after update(..., version=4) but before it recorded round 4 saves round 3.
  earlier = store.arrays(version=3)
  assert int(earlier['version']) == 3
  np.testing.assert_array_equal(earlier['controls'], [[1.0], [0.0]])
  np.testing.assert_array_equal(earlier['participated'], [True, False])
  with pytest.raises(ValueError, match='version 2 is not held'):
    store.arrays(version=2)


def test_save_load_and_restore(tmp_path):
  store = ClientControls(['a', 'b', 'c'], 3)
  _round(store, ['c', 'a'], [0, 1], [[1.0, 2, 3], [4, 5, 6]], version=5)
  path = str(tmp_path / 'controls.npz')
  store.save(path)
  again = ClientControls(['a', 'b', 'c'], 3)
  again.load(path)
  assert again.version == 5
  for cid in 'abc':
    np.testing.assert_array_equal(again.control(cid), store.control(cid))
    assert again.has_participated(cid) == store.has_participated(cid)
  arrays = dict(store.arrays())
  with pytest.raises(ValueError, match=r'shape \(3, 2\)'):
    ClientControls(['a', 'b', 'c'], 2).restore(arrays)
  with pytest.raises(ValueError, match='not all finite'):
    again.restore(dict(arrays, controls=np.full((3, 3), np.inf, np.float32)))
  with pytest.raises(ValueError, match='keys'):
    again.restore({'controls': arrays['controls']})
  np.testing.assert_array_equal(again.control('a'), [4.0, 5.0, 6.0])


def test_update_keeps_the_controls_of_the_cohort_for_cohort_was_given_in_its_order():
  # A round built for ['c', 'a'] and updated as ['a', 'c'] would give 'a' the control of 'c'.
  store = ClientControls(['a', 'b', 'c'], 2)
  store.for_cohort(['c', 'a'], ['data_c', 'data_a'])
  output = _output([0, 1], [[1.0, 2.0], [3.0, 4.0]])
  with pytest.raises(ValueError, match=r"client_ids \['a', 'c'\] are not the cohort "
                     r"\['c', 'a'\] given to for_cohort") as error:
    store.update(['a', 'c'], output)
  assert error.value.argument == 'client_ids' and error.value.value == ['a', 'c']
  with pytest.raises(ValueError, match=r"are not the cohort"):
    store.update(['c'], output)
  np.testing.assert_array_equal(store.arrays()['controls'], np.zeros((3, 2)))
  assert store.version == 0
  store.update(['c', 'a'], output)   # the cohort as given: kept by slot
  np.testing.assert_array_equal(store.control('c'), [1.0, 2.0])
  np.testing.assert_array_equal(store.control('a'), [3.0, 4.0])


def test_update_needs_a_for_cohort_of_its_own():
  store = ClientControls(['a', 'b'], 1)
  with pytest.raises(ValueError, match='call for_cohort') as error:
    store.update(['a'], _output([0], [[1.0]]))
  assert error.value.argument == 'client_ids'
  _round(store, ['a'], [0], [[1.0]])
  # The round's output, kept once: a second update (or one after a restore) has no round.
  with pytest.raises(ValueError, match='there is none since the last update'):
    store.update(['a'], _output([0], [[5.0]]))
  store.for_cohort(['b'], [None])
  store.restore(store.arrays())
  with pytest.raises(ValueError, match='call for_cohort'):
    store.update(['b'], _output([0], [[5.0]]))
  np.testing.assert_array_equal(store.arrays()['controls'], [[1.0], [0.0]])


def test_for_process_refuses_ids_of_another_population_than_the_process_was_built_for():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tests.conftest import make_tiny_keras_model  # pylint: disable=g-import-not-at-top
  from tests.learning import conftest as h  # pylint: disable=g-import-not-at-top
  from tff_conflict import learning  # pylint: disable=g-import-not-at-top
  process = learning.build_scaffold(
      make_tiny_keras_model, input_spec=h.input_spec(), num_clients=10,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(learning_rate=0.1))
  ids = [f'client_{k}' for k in range(20)]
  # The server control c <- c + sum_i dc_i / N would divide by 10 for a federation of 20.
  with pytest.raises(ValueError, match=r'client_ids name 20 clients but process was built with '
                     r'num_clients=10') as error:
    ClientControls.for_process(process, ids)
  assert error.value.argument == 'client_ids' and error.value.value == ids
  assert ClientControls.for_process(process, ids[:10]).num_clients == 10
