"""`tff_conflict.data.idx.read_idx`: the IDX format, gzip or plain, and damaged files refused with
an error naming the file."""

import gzip

import numpy as np
import pytest

from tff_conflict.data import idx
from tests.data import idx_fixtures


@pytest.mark.parametrize('content, expected', [
    # uint8 [2, 3]
    (bytes([0, 0, 0x08, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6]),
     np.array([[1, 2, 3], [4, 5, 6]], np.uint8)),
    # int16 [2], big-endian: 0x0100 = 256, 0xFFFE = -2
    (bytes([0, 0, 0x0B, 1, 0, 0, 0, 2, 0x01, 0x00, 0xFF, 0xFE]), np.array([256, -2], np.int16)),
    # float32 [1]: 0x3FC00000 = 1.5
    (bytes([0, 0, 0x0D, 1, 0, 0, 0, 1, 0x3F, 0xC0, 0, 0]), np.array([1.5], np.float32)),
    # int8 [0]: no elements
    (bytes([0, 0, 0x09, 1, 0, 0, 0, 0]), np.zeros([0], np.int8)),
], ids=['uint8', 'int16', 'float32', 'empty'])
@pytest.mark.parametrize('compress', [False, True])
def test_reads_the_format_by_hand(tmp_path, content, expected, compress):
  path = tmp_path / 'a.idx'
  path.write_bytes(gzip.compress(content) if compress else content)
  got = idx.read_idx(path)
  assert got.dtype == expected.dtype and got.dtype.isnative
  np.testing.assert_array_equal(got, expected)
  assert got.shape == expected.shape


@pytest.mark.parametrize('dtype', ['uint8', 'int8', 'int16', 'int32', 'float32', 'float64'])
def test_round_trip_of_every_type(tmp_path, dtype):
  array = (np.arange(2 * 3 * 4) - 5).reshape(2, 3, 4).astype(dtype)
  got = idx.read_idx(idx_fixtures.write_idx(tmp_path / 'x.gz', array))
  np.testing.assert_array_equal(got, array)
  assert got.dtype == array.dtype


_GOOD = idx_fixtures.idx_bytes(np.arange(12, dtype=np.uint8).reshape(3, 4))


@pytest.mark.parametrize('content, message', [
    (b'', 'not an IDX file (magic number missing'),
    (b'\x89PNG\r\n\x1a\n', 'not an IDX file (magic number 89504e47'),
    (bytes([0, 0, 0x07, 1, 0, 0, 0, 1, 0]), 'not an IDX file (magic number 00000701'),
    (bytes([0, 0, 0x08, 3, 0, 0, 0, 1]), 'truncated IDX header (8 bytes; 3 dimensions need 16)'),
    (_GOOD[:-1], 'truncated: the header gives shape (3, 4) of uint8 (24 bytes in all) but the '
     'file holds 23 bytes'),
    (_GOOD + b'\x00', 'trailing bytes after the data'),
    (gzip.compress(_GOOD)[:-6], 'not a readable gzip file'),
], ids=['empty', 'png', 'type', 'header', 'truncated', 'trailing', 'gzip'])
def test_a_damaged_file_is_refused_naming_it(tmp_path, content, message):
  path = tmp_path / 'damaged-idx1-ubyte.gz'
  path.write_bytes(content)
  with pytest.raises(idx.IdxFormatError) as info:
    idx.read_idx(path)
  assert str(info.value).startswith(f'{path}: ') and message in str(info.value)
  assert isinstance(info.value, ValueError)


def test_a_missing_file_is_file_not_found(tmp_path):
  with pytest.raises(FileNotFoundError):
    idx.read_idx(tmp_path / 'absent.gz')
