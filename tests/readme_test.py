"""The README's two commands stay in sync with .ci/run and the repository."""

import pathlib
import re

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
  from monoloc_jax import configs  # pylint: disable=g-import-not-at-top
  main_cmd = [c for c in _commands() if 'monoloc-train' in c]
  assert len(main_cmd) == 1
  config = re.search(r'--config=(\S+)', main_cmd[0]).group(1)
  assert pathlib.Path(configs.resolve(config)).is_file()
