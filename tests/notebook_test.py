"""The Colab notebook (issue 6): committed without outputs, and runs top to bottom headless.

The run uses nbclient with MONOLOC_NOTEBOOK_SMOKE=1 (tiny training on the CPU).
Kernel: the test writes its own kernelspec, pointing at this interpreter
(sys.executable -m ipykernel_launcher), into a temporary JUPYTER_PATH directory
and asks for it by a unique name. That needs only ipykernel importable here; no
kernelspec has to be installed on the machine, and a user-level `python3`
kernelspec that points at another Python cannot be picked up by mistake.
"""

import importlib.util
import json
import os
import pathlib
import sys
import time

import pytest

nbformat = pytest.importorskip('nbformat')
nbclient = pytest.importorskip('nbclient')

REPO = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / 'notebooks' / 'monoloc_jax_colab.ipynb'
GENERATOR = REPO / 'notebooks' / 'make_notebook.py'
KERNEL_NAME = 'monoloc-jax-notebook-test'
MAX_BYTES = 1_000_000
TIME_LIMIT_S = 180


def test_committed_notebook_has_no_outputs_and_is_small():
  assert NOTEBOOK.stat().st_size < MAX_BYTES
  nb = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(nb)
  code = [c for c in nb.cells if c.cell_type == 'code']
  assert len(code) == 7
  for cell in code:
    assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
  assert nb.cells[0].cell_type == 'markdown' and 'Length Generalization' in nb.cells[0].source


def test_committed_notebook_matches_its_generator():
  spec = importlib.util.spec_from_file_location('make_notebook', GENERATOR)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert NOTEBOOK.read_text() == module.render(), (
      'notebooks/monoloc_jax_colab.ipynb is stale: run python notebooks/make_notebook.py')


def test_notebook_is_launchable_from_the_published_repository():
  """One repository URL (pyproject.toml's [project.urls] Repository) feeds the Colab badge,
  the README link and the install cell; no placeholder link, no runtime forced."""
  spec = importlib.util.spec_from_file_location('make_notebook', GENERATOR)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  url = module.repo_url()
  nb = nbformat.read(NOTEBOOK, as_version=4)
  intro, install = nb.cells[0].source, nb.cells[1].source
  badge = url.replace('https://github.com/', 'https://colab.research.google.com/github/')
  assert f'({badge}/blob/main/notebooks/monoloc_jax_colab.ipynb)' in intro
  assert 'colab-badge.svg' in intro and f'({url}#readme)' in intro
  assert '../README.md' not in intro and '<owner>' not in install
  assert f"REPO_URL = os.environ.get('MONOLOC_REPO_URL', '{url}')" in install
  assert "f'monoloc_jax @ git+{REPO_URL}'" in install and 'raise' not in install
  assert 'accelerator' not in nb.metadata
  training = next(c.source for c in nb.cells if c.cell_type == 'code' and 'SEEDS =' in c.source)
  assert 'SEEDS = 3' in training and 'drive.mount(' in training


def test_first_cell_states_what_it_needs_and_the_measured_time():
  """The runtime type, and minutes measured on a CPU (make_notebook.CPU_MINUTES);
  GPU and TPU are marked 'not measured' (no timing there is claimed anywhere)."""
  spec = importlib.util.spec_from_file_location('make_notebook', GENERATOR)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  nb = nbformat.read(NOTEBOOK, as_version=4)
  intro = nb.cells[0].source
  needs = intro.index('**What it needs.** Any runtime type (*Runtime → Change runtime type*)')
  assert needs < intro.index('What you will see')                  # before the tour
  full, smoke = module.CPU_MINUTES['full'], module.CPU_MINUTES['smoke']
  assert (f'| CPU, 2 cores | about {full} min (measured) | about {smoke} min (measured) |'
          in intro.splitlines())
  assert '| GPU | not measured | not measured |' in intro.splitlines()
  assert '| TPU | not measured | not measured |' in intro.splitlines()
  everything = '\n'.join(c.source for c in nb.cells)
  for unmeasured in ('instead of tens of minutes', 'seconds per epoch on a GPU',
                     'runs in about a minute'):
    assert unmeasured not in everything
  assert f"'about {full} min on 2 cores).'" in nb.cells[3].source        # the CPU line


def _write_kernelspec(jupyter_dir: pathlib.Path) -> None:
  kernel_dir = jupyter_dir / 'kernels' / KERNEL_NAME
  kernel_dir.mkdir(parents=True)
  (kernel_dir / 'kernel.json').write_text(json.dumps({
      'argv': [sys.executable, '-m', 'ipykernel_launcher', '-f', '{connection_file}'],
      'display_name': 'monoloc_jax test kernel', 'language': 'python'}))


def _text(cell) -> str:
  return ''.join(o.get('text', '') for o in cell.outputs if o.output_type == 'stream')


def test_notebook_runs_top_to_bottom_in_smoke_mode(tmp_path, monkeypatch):
  pytest.importorskip('ipykernel')
  _write_kernelspec(tmp_path / 'jupyter')
  monkeypatch.setenv('JUPYTER_PATH', str(tmp_path / 'jupyter'))
  monkeypatch.setenv('JUPYTER_RUNTIME_DIR', str(tmp_path / 'runtime'))
  monkeypatch.setenv('IPYTHONDIR', str(tmp_path / 'ipython'))
  monkeypatch.setenv('MONOLOC_NOTEBOOK_SMOKE', '1')
  monkeypatch.delenv('MPLBACKEND', raising=False)
  # MONOLOC_CACHE_DIR (conftest) is inherited, so generated data stays in the session cache.
  assert os.environ.get('MONOLOC_CACHE_DIR')

  nb = nbformat.read(NOTEBOOK, as_version=4)
  client = nbclient.NotebookClient(
      nb, kernel_name=KERNEL_NAME, timeout=TIME_LIMIT_S, startup_timeout=90,
      resources={'metadata': {'path': str(NOTEBOOK.parent)}})
  start = time.time()
  client.execute()                      # raises CellExecutionError on any error
  elapsed = time.time() - start
  executed = tmp_path / 'executed.ipynb'
  nbformat.write(nb, executed)          # kept for inspection when something looks wrong

  assert elapsed < TIME_LIMIT_S, f'the notebook took {elapsed:.0f}s'
  code = [c for c in nb.cells if c.cell_type == 'code']
  assert all(o.output_type != 'error' for c in code for o in c.outputs)
  install, devices, mesh, kernel, training, table, heatmaps = code
  assert 'already installed: nothing to install' in _text(install)
  assert '| smoke setting' in _text(install)
  for platform in ('TPU', 'GPU', 'CPU'):
    assert f'{platform}: ' in _text(devices)
  assert 'default backend: ' in _text(devices)
  assert '1 seed(s) on 1 device' in _text(mesh) or 'mesh seed=' in _text(mesh)
  assert 'at once' in _text(mesh) or 'vmapped program' in _text(mesh)
  assert 'sum = 1.0' in _text(kernel)
  assert 'OneStepAttn' in _text(training) and 'Relative' in _text(training)
  assert _text(training).count('seeds 0, 1, 2: ') == 2          # three seeds in one program
  assert 'test_100' in _text(table)
  assert 'input (100 digits)' in _text(heatmaps)
  assert _text(heatmaps).count('best dev accuracy') == 2         # each names its best-dev seed
  images = {i: sum('image/png' in o.get('data', {}) for o in c.outputs)
            for i, c in enumerate(code)}
  assert images[3] == 1 and images[5] == 1 and images[6] == 2, images
  assert executed.stat().st_size < MAX_BYTES, f'{executed.stat().st_size} bytes'
