"""Creates or updates `.venv` so that it holds exactly the packages in `requirements.lock`
(BUILD_NOTES.md): `python3.11 tools/sync_env.py [--lock requirements.lock] [--venv .venv]`."""

import argparse
import hashlib
import os
import pathlib
import re
import subprocess
import sys

_REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
_STAMP_NAME = '.tff_conflict-lock.sha256'
_PTH_NAME = 'tff_conflict_repo.pth'
# Packages the venv itself provides; the lock does not manage them.
_UNMANAGED = {'pip', 'setuptools'}
_REQUIRED_PYTHON = (3, 11)


def _canonical(name: str) -> str:
  return re.sub(r'[-_.]+', '-', name).lower()


def _read_lock(lock: pathlib.Path) -> dict[str, str]:
  pins = {}
  for raw in lock.read_text().splitlines():
    line = raw.split('#', 1)[0].strip()
    if not line:
      continue
    if '==' not in line:
      sys.exit(f'sync_env: {lock}: every line must pin one version with ==, got {raw!r}')
    name, version = line.split('==', 1)
    pins[_canonical(name)] = version.strip()
  return pins


def _run(*args: str) -> str:
  return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def _venv_python(venv: pathlib.Path) -> pathlib.Path:
  return venv / 'bin' / 'python'


def _ensure_venv(venv: pathlib.Path) -> None:
  python = _venv_python(venv)
  if python.exists():
    version = _run(str(python), '-c', 'import sys; print(*sys.version_info[:2])').split()
    if tuple(int(v) for v in version) == _REQUIRED_PYTHON:
      return
    print(f'sync_env: {venv} has Python {".".join(version)}; recreating it with '
          f'Python {".".join(map(str, _REQUIRED_PYTHON))}', flush=True)
    subprocess.run(['rm', '-rf', str(venv)], check=True)
  if sys.version_info[:2] != _REQUIRED_PYTHON:
    sys.exit('sync_env: run this script with Python 3.11 (for example `make setup '
             'PYTHON=/path/to/python3.11`); it is running under ' + sys.version.split()[0])
  print(f'sync_env: creating {venv}', flush=True)
  subprocess.run([sys.executable, '-m', 'venv', str(venv)], check=True)


def _digest(lock: pathlib.Path) -> str:
  """SHA-256 of the lock and of this script: a venv stamped with it is up to date."""
  h = hashlib.sha256()
  h.update(lock.read_bytes())
  h.update(pathlib.Path(__file__).read_bytes())
  return h.hexdigest()


def _site_packages(venv: pathlib.Path) -> pathlib.Path:
  return pathlib.Path(_run(str(_venv_python(venv)), '-c',
                           'import sysconfig; print(sysconfig.get_paths()["purelib"])').strip())


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--lock', default=str(_REPO_ROOT / 'requirements.lock'))
  parser.add_argument('--venv', default=str(_REPO_ROOT / '.venv'))
  args = parser.parse_args()
  lock = pathlib.Path(args.lock).resolve()
  venv = pathlib.Path(args.venv).resolve()
  if not lock.exists():
    sys.exit(f'sync_env: lock file {lock} does not exist')
  pins = _read_lock(lock)

  _ensure_venv(venv)
  stamp = venv / _STAMP_NAME
  digest = _digest(lock)
  pth = _site_packages(venv) / _PTH_NAME
  if stamp.exists() and stamp.read_text().strip() == digest and pth.exists():
    print(f'sync_env: {venv.name} is up to date with {lock.name}', flush=True)
    return

  python = str(_venv_python(venv))
  pip = [python, '-m', 'pip', '--disable-pip-version-check']
  stamp.unlink(missing_ok=True)  # A failure below leaves the venv marked as stale.
  print(f'sync_env: installing {len(pins)} pinned packages from {lock.name} (--no-deps)',
        flush=True)
  subprocess.run(pip + ['install', '--quiet', '--no-deps', '-r', str(lock)], check=True)

  installed = {}
  for line in _run(*pip, 'freeze', '--all', '--exclude-editable').splitlines():
    if '==' in line:
      name, version = line.split('==', 1)
      installed[_canonical(name)] = version
  extra = sorted(set(installed) - set(pins) - _UNMANAGED)
  if extra:
    print(f'sync_env: removing packages not in the lock: {" ".join(extra)}', flush=True)
    subprocess.run(pip + ['uninstall', '-y'] + extra, check=True)
  wrong = {n: (installed.get(n), v) for n, v in pins.items() if installed.get(n) != v}
  if wrong:
    sys.exit(f'sync_env: after install these packages do not match the lock: {wrong}')

  pth.write_text(str(_REPO_ROOT) + '\n')
  subprocess.run([python, '-c',
                  'import tensorflow_federated as tff, tff_conflict; '
                  'assert tff.__version__ == "0.87.0", tff.__version__; '
                  # No federated call ran, so no worker exists; exiting at once skips TFF's
                  # ServiceManager.__del__, which prints a traceback at interpreter teardown.
                  'import os; os._exit(0)'],
                 check=True, env={**os.environ, 'TF_CPP_MIN_LOG_LEVEL': '3'})
  stamp.write_text(digest + '\n')
  print(f'sync_env: {venv.name} now matches {lock.name}', flush=True)


if __name__ == '__main__':
  main()
