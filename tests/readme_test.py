"""The README's commands: the two commands stay in sync with .ci/run and the repository;
every command of "Using it" and every example of "Using it from Python" runs."""

import glob
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _commands():
  blocks = re.findall(r'```bash\n(.*?)```', (REPO / 'README.md').read_text(), re.S)
  return [line for b in blocks for line in b.splitlines() if line.startswith('python3 -m venv')]


def test_ci_runs_exactly_the_readme_test_command():
  test_cmd = [c for c in _commands() if 'pytest' in c]
  assert len(test_cmd) == 1
  ci_lines = (REPO / '.ci' / 'run').read_text().splitlines()
  assert test_cmd[0] in ci_lines


def test_main_job_command_points_at_existing_config():
  from monoloc_jax import launcher  # pylint: disable=g-import-not-at-top
  main_cmd = [c for c in _commands() if 'monoloc-train' in c]
  assert len(main_cmd) == 1
  config = re.search(r'--config=(\S+)', main_cmd[0]).group(1)
  assert pathlib.Path(launcher.resolve(config)).is_file()


# ---------------------------------------------------------------------------------------
# "Using it": every command of its block runs as written ("Library users II", item 9).
# ---------------------------------------------------------------------------------------
README = REPO / 'README.md'

# Small runs: what the test changes, and nothing else. A command that starts a new run
# gets these settings appended (tiny data and model, one epoch); numbers that would make a
# small run long are scaled down: a resume's --config.max_epochs (to one more epoch than
# the small run's), an evaluation's --config.eval_size (to 8, below the small run's 16,
# which also exercises the partial-evaluation path), monoloc-benchmark's sizes. The CFQ
# release cannot be downloaded here: /data/cfq is replaced by a fixture of its format.
SMALL_RUN = ('--config.train_size=64', '--config.eval_size=16', '--config.max_epochs=1',
             '--config.gru.embed_dim=8', '--config.hidden_dim=16', '--config.gru.value_dim=16',
             '--config.qk_dim=8', '--config.eval_batch_size=16',
             '--config.bucket_batches=False')         # one training shape to compile
SMALL_BENCHMARK = ('--train_size=64', '--decode_size=16', '--vmapped_seeds=2',
                   '--eval_batch_size=16', '--batch_size=16', '--config.gru.embed_dim=8',
                   '--config.hidden_dim=16', '--config.gru.value_dim=16', '--config.qk_dim=8')
SCAN_LINES = ('walk\tI_WALK', 'jump\tI_JUMP', 'look\tI_LOOK', 'run\tI_RUN',
              'walk twice\tI_WALK I_WALK', 'jump left\tI_TURN_LEFT I_JUMP',
              'look thrice\tI_LOOK I_LOOK I_LOOK', 'run and walk\tI_RUN I_WALK')


def using_it_commands(readme: pathlib.Path = README):
  """The commands of the first bash block of README's "Using it", comments removed."""
  text = readme.read_text(encoding='utf-8')
  section = text[text.index('\n## Using it\n'):]
  block = re.search(r'```bash\n(.*?)```', section, re.S).group(1)
  return [shlex.split(line, comments=True) for line in block.splitlines() if line.strip()]


def _small(argv, work: pathlib.Path, cfq_dir: pathlib.Path):
  """(argv to run, what the test changed) for one README command."""
  argv = [f'--data_dir={cfq_dir}' if a == '--data_dir=/data/cfq' else a for a in argv]
  args = dict(a[2:].split('=', 1) for a in argv[1:] if a.startswith('--') and '=' in a)
  prog = argv[0]
  if prog == 'python':
    argv = [sys.executable] + [str(REPO / a) if a.startswith('experiments/') else a
                               for a in argv[1:]]
  if prog == 'monoloc-benchmark':
    argv = argv + list(SMALL_BENCHMARK)
  if prog == 'monoloc-train' and 'workdir' in args:
    mode = args.get('mode', 'train')
    resuming = (work / args['workdir'] / 'config.json').exists()
    if mode == 'train' and not resuming:
      argv = argv + list(SMALL_RUN)
    elif mode == 'train':
      argv = [re.sub(r'^--config\.max_epochs=\d+$', '--config.max_epochs=2', a) for a in argv]
    elif mode == 'evaluate':
      argv = [re.sub(r'^--config\.eval_size=\d+$', '--config.eval_size=8', a) for a in argv]
  expanded = []
  for a in argv:                        # the shell's glob, e.g. monoloc-results runs/*
    expanded += sorted(glob.glob(str(work / a))) if '*' in a else [a]
  return [str(pathlib.Path(p).relative_to(work)) if p.startswith(str(work)) else p
          for p in expanded]


def _cfq_fixture(root: pathlib.Path) -> pathlib.Path:
  import tasks_scan_cfq_test  # pylint: disable=g-import-not-at-top  (tests/ is on sys.path)
  return tasks_scan_cfq_test._cfq_release(root)  # pylint: disable=protected-access


@pytest.fixture(scope='module')
def using_it(tmp_path_factory):
  """Runs every command of README "Using it" in order, in a fresh directory (which has
  SCAN files at ../shared/data/scan/length_split, as the README's command expects).
  Returns (work directory, [(command, completed process)])."""
  root = tmp_path_factory.mktemp('readme')
  work = root / 'repo'
  work.mkdir()
  scan = root / 'shared' / 'data' / 'scan' / 'length_split'
  scan.mkdir(parents=True)
  for name in ('tasks_train_length.txt', 'tasks_validation_length.txt',
               'tasks_test_length.txt'):
    (scan / name).write_text('\n'.join(SCAN_LINES) + '\n')
  cfq_dir = _cfq_fixture(root / 'cfq')
  import jax  # pylint: disable=g-import-not-at-top
  env = dict(os.environ, MONOLOC_XLA_CACHE=jax.config.jax_compilation_cache_dir or '',
             PATH=f'{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ["PATH"]}')
  done = []
  for argv in using_it_commands():
    if argv[0] == 'tensorboard':        # a server that runs until stopped: see the test
      done.append((argv, None))
      continue
    small = _small(argv, work, cfq_dir)
    start = time.time()
    proc = subprocess.run(small, cwd=work, env=env, capture_output=True, text=True,
                          timeout=900)
    print(f'{time.time() - start:6.1f}s  {shlex.join(small)}')
    done.append((argv, proc))
  return work, done


def test_every_using_it_command_runs_as_written(using_it):
  """Before: `monoloc-train --workdir=runs/recopy_mono --config.max_epochs=20
  --config.dev_metric=teacher_forced` was refused by the resume rule (exit 2)."""
  work, done = using_it
  failed = [(' '.join(argv), proc.returncode, proc.stderr.strip().splitlines()[-1:])
            for argv, proc in done if proc is not None and proc.returncode != 0]
  assert not failed, failed
  programs = [argv[0] for argv, _ in done]
  assert {'monoloc-train', 'monoloc-results', 'monoloc-params', 'monoloc-benchmark',
          'python', 'tensorboard'} <= set(programs)
  out = {' '.join(argv): proc.stdout for argv, proc in done if proc is not None}
  # The resume trained one epoch more; the teacher-forced run is a run of its own.
  history = (work / 'runs' / 'recopy_mono' / 'metrics.jsonl').read_text().splitlines()
  assert len(history) == 2
  tf_config = json.loads((work / 'runs' / 'recopy_mono_tf' / 'config.json').read_text())
  assert tf_config['dev_metric'] == 'teacher_forced'
  results = json.loads((work / 'runs' / 'recopy_mono' / 'results.json').read_text())
  assert results['last_evaluation']['partial'], results['last_evaluation']
  predict = [o for c, o in out.items() if '--mode=predict' in c]
  assert len(predict) == 2 and all(o.startswith('decoding with seed ') for o in predict)
  assert 'seed 2 (' in predict[1]                          # --seed_index=2
  table = next(o for c, o in out.items() if c.startswith('monoloc-results'))
  assert 'recopy' in table and 'scan_length' in table and 'cfq_length' in table
  assert (work / 'runs' / 'recopy_mono' / 'attention.png').exists()
  assert json.loads((work / 'bench.json').read_text())
  # tensorboard --logdir runs/ reads these event files.
  assert list((work / 'runs' / 'recopy_mono' / 'tensorboard' / 'seed_0').glob('events.*'))


def test_the_python_examples_run(using_it):
  """README "Using it from Python": every python block, in order, in one namespace, in
  the directory where the "Using it" commands trained runs/recopy_mono."""
  work, _ = using_it
  text = README.read_text(encoding='utf-8')
  section = text[text.index('\n## Using it from Python\n'):]
  section = section[:section.index('\n## ', 1)]
  blocks = re.findall(r'```python\n(.*?)```', section, re.S)
  assert len(blocks) == 2
  cwd = os.getcwd()
  os.chdir(work)
  try:
    namespace = {}
    for block in blocks:
      exec(compile(block, 'README.md', 'exec'), namespace)  # pylint: disable=exec-used
  finally:
    os.chdir(cwd)
  assert namespace['run'].seed.index in range(5)
  assert namespace['decoded'].seed == namespace['run'].seed
