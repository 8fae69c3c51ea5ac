"""The reproduction runner's --executor=ray (issue 13): a local Ray, a worker killed once."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from monoloc_jax import cluster
from monoloc_jax import errors

REPO = pathlib.Path(__file__).resolve().parent.parent
TINY = ['--grid=table2', '--seeds=0', '--max_units=2',           # copy/content, copy/relative
        '--config.max_epochs=2', '--config.train_size=200', '--config.eval_size=32',
        '--config.eval_batch_size=32', '--config.test_splits=test_15', '--config.gru.embed_dim=16',
        '--config.hidden_dim=32', '--config.gru.value_dim=32', '--config.bucket_batches=False',
        '--config.dev_metric=teacher_forced', '--config.perfect_dev_patience=0']


def _reproduce(tmp: pathlib.Path, name: str, *flags: str, env=None) -> subprocess.CompletedProcess:
  cmd = [sys.executable, str(REPO / 'experiments' / 'reproduce.py'), *TINY,
         f'--results_dir={tmp / name / "results"}', f'--workdir={tmp / name / "runs"}', *flags]
  env = dict(os.environ, **(env or {}), MONOLOC_XLA_CACHE=str(tmp / 'xla'), JAX_PLATFORMS='cpu',
             PYTHONPATH=str(REPO) + os.pathsep + os.environ.get('PYTHONPATH', ''))
  return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp, timeout=900,
                        check=False)


def _records(root: pathlib.Path):
  out = {}
  for path in sorted(root.rglob('seed*.json')):
    rec = json.loads(path.read_text())
    del rec['wall_time_s']
    out[str(path.relative_to(root))] = rec
  return out


def test_ray_executor_survives_a_killed_worker_with_the_local_results(tmp_path):
  local = _reproduce(tmp_path, 'local', '--executor=local')
  assert local.returncode == 0, local.stderr[-3000:]
  marker = tmp_path / 'killed'
  ray = _reproduce(tmp_path, 'ray', '--executor=ray', '--ray_num_cpus=2',
                   env={cluster.KILL_ONCE_ENV: str(marker)})
  assert ray.returncode == 0, ray.stderr[-3000:]
  assert marker.exists(), 'no worker was killed'
  assert ray.stdout.count('resumed from epoch 1') == 1, ray.stdout   # the retried unit resumed
  assert 'finished: 2 units run, 0 failed' in ray.stdout
  want = _records(tmp_path / 'local' / 'results')
  assert len(want) == 2
  assert _records(tmp_path / 'ray' / 'results') == want


def test_ray_missing_is_a_one_line_error_naming_the_install(monkeypatch):
  monkeypatch.setitem(sys.modules, 'ray', None)          # `import ray` raises ImportError
  with pytest.raises(errors.MonolocError, match=r'--executor=ray needs Ray; install it with '
                     r'pip install "monoloc_jax\[ray\]".*or use --executor=local'):
    cluster.import_ray()


def test_ray_flags_need_the_ray_executor(tmp_path):
  proc = _reproduce(tmp_path, 'x', '--ray_address=auto', '--dry_run')
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1] == (
      'error: --ray_address needs --executor=ray; valid executors: local, ray')


def test_resources_become_ray_options():
  assert cluster.Resources().ray_options() == {'num_cpus': 1.0, 'num_gpus': 0.0}
  assert cluster.Resources(cpus=4, tpus=4).ray_options() == {
      'num_cpus': 4, 'num_gpus': 0.0, 'resources': {'TPU': 4}}
