"""`--mode=predict` decodes only inputs it can: an input holding a reserved token
(`<eos>`, `<pad>`, ...) or a token not in the run's vocabulary is one `error:` line
(exit 2) that lists them, and nothing is decoded. These went through before: the
reserved tokens were decoded as input, unknown ones as `<unk>`, with exit 0.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import jax
import pytest

from monoloc_jax import inference
from monoloc_jax import rundir
from monoloc_jax.vocab import Vocabulary

@pytest.fixture
def run(tiny_run) -> pathlib.Path:
  """conftest's one-epoch run, shared by the tests that only evaluate or decode it."""
  return tiny_run


def _predict(workdir, *inputs) -> subprocess.CompletedProcess:
  """A real `monoloc-train --mode=predict` (as `python -m monoloc_jax.main`)."""
  env = dict(os.environ, MONOLOC_XLA_CACHE=jax.config.jax_compilation_cache_dir or '')
  return subprocess.run(
      [sys.executable, '-m', 'monoloc_jax.main', f'--workdir={workdir}', '--mode=predict',
       *[f'--inputs={text}' for text in inputs]],
      capture_output=True, text=True, timeout=600, env=env)


def test_reserved_tokens_in_an_input_are_one_line_listing_them(run):
  proc = _predict(run, '1 2 3', '1 <eos> <pad> <sos> 2')
  assert proc.returncode == 2, proc.stderr
  assert proc.stdout == ''                          # the valid first input is not decoded
  assert proc.stderr.splitlines() == [
      "error: the input '1 <eos> <pad> <sos> 2' holds the reserved token(s) <eos>, <pad>, "
      '<sos>; an input may not hold any of <pad>, <sos>, <eos>, <unk> (the model adds the '
      'markers it needs)'], proc.stderr


def test_unknown_tokens_are_one_line_listing_them_and_the_vocabulary(run):
  proc = _predict(run, '4,7,9')
  assert proc.returncode == 2, proc.stderr
  assert proc.stdout == ''
  task_tokens = Vocabulary.load(run / rundir.VOCAB).tokens[4:]
  assert task_tokens == tuple('0123456789')
  assert proc.stderr.splitlines() == [
      "error: the input '4,7,9' holds token(s) not in the vocabulary: '4,7,9'; an input "
      'is whitespace-separated tokens of: 0 1 2 3 4 5 6 7 8 9'], proc.stderr


def test_a_valid_input_decodes_and_names_only_its_own_tokens(run):
  proc = _predict(run, '4 7 9')
  assert proc.returncode == 0, proc.stderr
  assert proc.stderr == ''
  lines = proc.stdout.splitlines()
  assert lines[0].startswith('decoding with seed 0') and lines[1] == 'input : 4 7 9'
  attends = lines[3].split()
  assert attends[0] == 'attends:'
  for item in attends[1:]:                 # token@position(the source token there)
    name = item[item.index('(') + 1:-1]
    assert name in ('START', '4', '7', '9', 'END'), item


def test_a_run_whose_sources_ended_in_eos_gets_it_appended(run, tmp_path):
  """The authors' DeDupe data (`config.source_eos_tasks`): every training source
  ended in a literal <eos>, so predict appends it instead of the user."""
  workdir = tmp_path / 'w'
  shutil.copytree(run, workdir)
  config = json.loads((workdir / rundir.CONFIG).read_text())
  config['source_eos_tasks'] = 'copy'
  (workdir / rundir.CONFIG).write_text(json.dumps(config))
  with_eos, = inference.decode_with_attention(str(workdir), ['4 7 9'])
  plain, = inference.decode_with_attention(str(run), ['4 7 9'])
  assert with_eos.source == ('4', '7', '9', '<eos>') and plain.source == ('4', '7', '9')
  assert with_eos.attention.shape[1] == 6 and plain.attention.shape[1] == 5
