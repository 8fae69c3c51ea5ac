"""The Colab notebook (issue 6): committed without outputs, and runs top to bottom headless.

The run uses nbclient with MONOLOC_NOTEBOOK_SMOKE=1 (tiny training on the CPU).
Kernel: the test writes its own kernelspec, pointing at this interpreter
(sys.executable -m ipykernel_launcher), into a temporary JUPYTER_PATH directory
and asks for it by a unique name. That needs only ipykernel importable here; no
kernelspec has to be installed on the machine, and a user-level `python3`
kernelspec that points at another Python cannot be picked up by mistake.
"""

import ast
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


def _generator():
  spec = importlib.util.spec_from_file_location('make_notebook', GENERATOR)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _cell_functions(source: str, *names: str) -> dict:
  """The named top-level functions of a notebook cell, defined in a fresh namespace
  (the cell itself is not run)."""
  tree = ast.parse('\n'.join(l for l in source.splitlines() if not l.startswith('%')))
  defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
  assert sorted(d.name for d in defs) == sorted(names)
  namespace = {}
  exec(compile(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
                          + defs, type_ignores=[]), 'install-cell', 'exec'), namespace)
  return namespace


def test_no_placeholder_repository_in_what_a_user_runs():
  """No OWNER placeholder in the README, pyproject.toml, the notebook or the package: a
  Colab user must never be sent to github.com/OWNER/... ("Library users II", item 6)."""
  files = [REPO / 'README.md', REPO / 'pyproject.toml', *sorted((REPO / 'notebooks').iterdir()),
           *sorted((REPO / 'monoloc_jax').rglob('*.py'))]
  hits = [f'{f.relative_to(REPO)}:{i}' for f in files if f.is_file()
          for i, line in enumerate(f.read_text(encoding='utf-8').splitlines(), 1)
          if 'OWNER' in line]
  assert hits == []


def test_without_a_published_repository_there_is_no_badge_and_the_install_cell_takes_a_wheel():
  """pyproject.toml names no repository yet: the notebook shows no badge and no link, and
  its install cell takes the package from a wheel, a directory or a URL."""
  module = _generator()
  assert module.repo_url() is None
  nb = nbformat.read(NOTEBOOK, as_version=4)
  intro, install = nb.cells[0].source, nb.cells[1].source
  assert 'colab-badge.svg' not in intro and 'github.com' not in intro + install
  assert "os.environ.get('MONOLOC_PACKAGE'" in install and 'files.upload()' in install
  assert 'monoloc_jax-*.whl' in install
  assert 'accelerator' not in nb.metadata
  training = next(c.source for c in nb.cells if c.cell_type == 'code' and 'SEEDS =' in c.source)
  assert 'SEEDS = 3' in training and 'drive.mount(' in training


def test_a_configured_repository_adds_the_badge_and_the_git_install():
  module = _generator()
  url = 'https://github.com/someone/monoloc_jax'
  nb = module.build(url)
  intro, install = nb.cells[0].source, nb.cells[1].source
  badge = 'https://colab.research.google.com/github/someone/monoloc_jax'
  assert f'({badge}/blob/main/notebooks/monoloc_jax_colab.ipynb)' in intro
  assert 'colab-badge.svg' in intro and f'({url}#readme)' in intro
  assert f"REPO_URL = '{url}'" in install


def test_install_cell_finds_the_package_source(tmp_path, monkeypatch):
  """The order: MONOLOC_PACKAGE (a wheel, a directory or a URL), the checkout holding
  the notebook, a monoloc_jax-*.whl beside it (Colab: uploaded to /content), the
  configured repository; else None (the cell then asks for an upload on Colab)."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  fns = _cell_functions(nb.cells[1].source, 'find_checkout', 'package_source', 'pip_target')
  monkeypatch.delenv('MONOLOC_PACKAGE', raising=False)
  monkeypatch.delenv('MONOLOC_REPO', raising=False)
  monkeypatch.chdir(tmp_path)
  source = fns['package_source']
  assert source(repo_url=None) is None
  assert source(repo_url='https://github.com/x/monoloc_jax') == (
      'git', 'monoloc_jax @ git+https://github.com/x/monoloc_jax')
  wheel = tmp_path / 'monoloc_jax-0.1.0-py3-none-any.whl'
  wheel.write_bytes(b'')
  assert source(repo_url='https://github.com/x/monoloc_jax') == ('wheel', str(wheel))
  checkout = tmp_path / 'checkout'
  (checkout / 'monoloc_jax').mkdir(parents=True)
  (checkout / 'pyproject.toml').write_text('')
  (checkout / 'monoloc_jax' / '__init__.py').write_text('')
  monkeypatch.chdir(checkout)
  assert source(repo_url=None) == ('checkout', str(checkout))
  for given, kind in ((str(wheel), 'wheel'), (str(checkout), 'directory'),
                      ('git+https://example.org/monoloc_jax.git', 'git')):
    monkeypatch.setenv('MONOLOC_PACKAGE', given)
    got = source(repo_url=None)
    assert got[0] == kind and given in got[1], got
  monkeypatch.setenv('MONOLOC_PACKAGE', str(tmp_path / 'nope.whl'))
  with pytest.raises(SystemExit, match='MONOLOC_PACKAGE=.*nope.whl: no such file'):
    source(repo_url=None)
  assert fns['pip_target'](('wheel', str(wheel))) == [str(wheel)]
  assert fns['pip_target'](('checkout', str(checkout))) == ['-e', str(checkout)]


def test_install_cell_picks_the_jax_for_the_detected_runtime():
  """GPU or TPU hardware whose installed jax does not use it gets jax[cuda12] / jax[tpu]
  of the installed jax version; otherwise the cell says what is already there."""
  nb = nbformat.read(NOTEBOOK, as_version=4)
  fns = _cell_functions(nb.cells[1].source, 'detect_hardware', 'jax_for_runtime')
  detect, choose = fns['detect_hardware'], fns['jax_for_runtime']
  never = lambda path: False
  assert detect({}, exists=never, which=lambda name: None) == 'cpu'
  assert detect({}, exists=never, which=lambda name: '/usr/bin/nvidia-smi') == 'gpu'
  assert detect({}, exists=lambda path: path == '/dev/accel0', which=lambda name: None) == 'tpu'
  assert detect({'TPU_ACCELERATOR_TYPE': 'v5litepod-1'}, exists=never,
                which=lambda name: None) == 'tpu'
  assert choose('gpu', 'cpu', '0.4.33') == 'jax[cuda12]==0.4.33'
  assert choose('tpu', 'cpu', '0.4.33') == 'jax[tpu]==0.4.33'
  assert choose('gpu', 'gpu', '0.4.33') is None and choose('tpu', 'tpu', '0.4.33') is None
  assert choose('cpu', 'cpu', '0.4.33') is None


def test_a_built_wheel_installs_through_the_install_cells_command(tmp_path):
  """README's way to Colab before the repository is published: build a wheel, upload
  it; the install cell's pip target for it installs the package (configs included)."""
  import subprocess  # pylint: disable=g-import-not-at-top
  # README's command (pip fetches the build backend, as `pip install -e .` does).
  subprocess.run([sys.executable, '-m', 'pip', 'wheel', '-q', '--no-deps', '-w',
                  str(tmp_path / 'dist'), str(REPO)], check=True, timeout=300)
  wheel, = (tmp_path / 'dist').glob('monoloc_jax-*.whl')
  nb = nbformat.read(NOTEBOOK, as_version=4)
  fns = _cell_functions(nb.cells[1].source, 'pip_target')
  subprocess.run([sys.executable, '-m', 'pip', 'install', '-q', '--no-deps', '--target',
                  str(tmp_path / 'site'), *fns['pip_target'](('wheel', str(wheel)))],
                 check=True, timeout=300)
  out = subprocess.run(
      [sys.executable, '-c', 'import monoloc_jax, pathlib; from monoloc_jax import launcher; '
       'print(monoloc_jax.__version__, pathlib.Path(launcher.resolve("quick")).is_file(), '
       'monoloc_jax.__file__)'],
      capture_output=True, text=True, check=True, timeout=120, cwd=tmp_path,
      env=dict(os.environ, PYTHONPATH=str(tmp_path / 'site'))).stdout.split()
  assert out[:2] == [_generator_version(), 'True'] and out[2].startswith(str(tmp_path / 'site'))


def _generator_version() -> str:
  import re  # pylint: disable=g-import-not-at-top
  return re.search(r'^version\s*=\s*"([^"]+)"', (REPO / 'pyproject.toml').read_text(),
                   re.M).group(1)


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
