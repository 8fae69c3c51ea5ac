"""experiments/speed/side_by_side.py without torch: ratios, report, and its usage errors."""

import importlib.util
import os
import pathlib
import stat
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = REPO / 'experiments' / 'speed' / 'side_by_side.py'

_spec = importlib.util.spec_from_file_location('side_by_side', SCRIPT)
sbs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sbs)


def fake_round(k, authors_train, ours_train, authors_dec, authors_fwd, ours_eq, ours_bm):
  authors = {'train': {'samples': 2000, 'seconds': 2000 / authors_train,
                       'samples_per_s': authors_train, 'warmup_s': 0.1},
             'decode': {'samples': 2000, 'seconds': 2000 / authors_dec,
                        'samples_per_s': authors_dec, 'forward_samples_per_s': authors_fwd,
                        'row_steps': 660_000}}
  ours = {'train': {'samples': 2000, 'seconds': 2000 / ours_train, 'samples_per_s': ours_train,
                    'warmup_s': 55.0 if k == 1 else 0.3},
          'decode_equal': {'samples': 2000, 'seconds': 2000 / ours_eq, 'samples_per_s': ours_eq,
                           'row_steps': 660_000, 'row_steps_run': 660_000},
          'decode_benchmark': {'samples': 2000, 'seconds': 2000 / ours_bm,
                               'samples_per_s': ours_bm, 'row_steps': 706_560,
                               'row_steps_run': 706_560}}
  order = ['authors', 'ours'] if k % 2 else ['ours', 'authors']
  return {'round': k, 'order': order, 'authors': authors, 'ours': ours,
          'ratios': sbs.round_ratios(authors, ours)}


ROUNDS = [fake_round(1, 250.0, 1875.0, 60.0, 64.0, 600.0, 540.0),
          fake_round(2, 200.0, 1800.0, 50.0, 50.0, 650.0, 500.0),
          fake_round(3, 240.0, 1200.0, 60.0, 60.0, 480.0, 480.0)]


def test_round_ratios_are_ours_over_theirs():
  r = ROUNDS[0]['ratios']
  assert r['train'] == pytest.approx(7.5)
  assert r['decode'] == pytest.approx(10.0)
  assert r['decode_vs_forward'] == pytest.approx(600 / 64)
  assert r['decode_benchmark'] == pytest.approx(9.0)


def test_ratio_stats_median_min_max():
  assert sbs.ratio_stats([9.0, 7.5, 5.0]) == {'median': 7.5, 'min': 5.0, 'max': 9.0,
                                               'rounds': 3}
  assert sbs.ratio_stats([4.0, 2.0])['median'] == 3.0          # even count: the mean of two
  assert sbs.ratio_stats([3.25]) == {'median': 3.25, 'min': 3.25, 'max': 3.25, 'rounds': 1}
  with pytest.raises(ValueError):
    sbs.ratio_stats([])


def test_summary_over_rounds():
  s = sbs.summarize(ROUNDS)
  assert s['train'] == {'median': 7.5, 'min': 5.0, 'max': 9.0, 'rounds': 3}
  assert s['decode'] == {'median': 10.0, 'min': 8.0, 'max': 13.0, 'rounds': 3}
  assert s['decode_benchmark']['median'] == pytest.approx(9.0)
  assert s['samples_per_s']['ours_train']['median'] == 1800.0
  assert s['samples_per_s']['authors_decode_forward']['max'] == 64.0


def test_round_and_summary_formatting():
  text = sbs.format_round(ROUNDS[0])
  assert text.splitlines()[0] == 'round 1 (authors first):'
  assert 'ratio 7.50x' in text and 'ratio 10.00x' in text
  assert 'compile + warm-up 55.0 s' in text
  assert 'benchmark condition 9.00x' in text
  assert 'ours equal 660000 run of 660000' in text
  assert sbs.format_round(ROUNDS[1]).startswith('round 2 (ours first):')
  assert 'warm-up 0.3 s' in sbs.format_round(ROUNDS[1])
  summary = sbs.format_summary(sbs.summarize(ROUNDS), 'Test CPU, 2 logical CPUs')
  lines = summary.splitlines()
  assert lines[0] == ('summary over 3 round(s), ratio = ours / authors in samples/s, on '
                      'Test CPU, 2 logical CPUs:')
  assert lines[1].split() == ['training', 'median', '7.50x', 'min', '5.00x', 'max', '9.00x']
  assert lines[2].split()[:5] == ['decoding,', 'equal', 'steps', 'median', '10.00x']


def test_arithmetic_states_the_flop_rate_a_target_ratio_needs():
  r = dict(ROUNDS[0])
  assert sbs.arithmetic(r, 12.0) is None                     # a round without the figures
  r['ours'] = dict(r['ours'], arith={'train_flops_per_sample': 25.6e6,
                                     'gemm_large_gflops': 160.0, 'gemm_step_gflops': 64.0,
                                     'gemm_step_shape': [32, 128, 384]})
  a = sbs.arithmetic(r, 12.0)
  # authors 250 samples/s x 25.6 MFLOP = 6.4 GFLOP/s; ours 1875 x 25.6 M = 48 GFLOP/s;
  # 12 x 6.4 = 76.8 GFLOP/s needed: 48% of 160, 120% of 64.
  assert a['authors_gflops'] == pytest.approx(6.4)
  assert a['ours_gflops'] == pytest.approx(48.0)
  assert a['needed_gflops'] == pytest.approx(76.8)
  assert a['needed_of_large'] == pytest.approx(0.48)
  assert a['needed_of_step'] == pytest.approx(1.2)
  assert a['ours_of_large'] == pytest.approx(0.3)
  r['arith'] = a
  line = sbs.format_round(r).splitlines()[-1]
  assert line.split()[:2] == ['arithmetic', '25.60']
  assert 'authors 6.4, ours 48.0 GFLOP/s' in line
  assert '12x the authors needs 76.8 GFLOP/s = 48% of the 1024^3 rate, 120% of' in line
  rounds = [r, dict(r, arith=sbs.arithmetic(r, 12.0))]
  summary = sbs.summarize(rounds)
  assert summary['arith']['needed_gflops']['median'] == pytest.approx(76.8)
  text = sbs.format_summary(summary, 'Test CPU')
  assert text.splitlines()[-1].startswith('  median arithmetic: ours 48.0 GFLOP/s (30% of')
  assert 'arith' not in sbs.summarize(ROUNDS)                # rounds without the figures


def test_conditions_state_what_each_side_decodes_and_until_when():
  settings = {'task': 'recopy', 'train_samples': 2000, 'batch_size': 32,
              'decode_split': 'test_100', 'decode_key': 'long100', 'decode_samples': 2000,
              'eval_batch_size': 256}
  text = '\n'.join(sbs.conditions_text(settings))
  assert 'never stops at <eos>' in text and "longest gold target incl. <eos>" in text
  assert 'the same step count' in text and 'early exit' in text


def test_parse_cores():
  allowed = sorted(os.sched_getaffinity(0))
  assert sbs.parse_cores('') == allowed
  assert sbs.parse_cores(str(allowed[0])) == [allowed[0]]
  with pytest.raises(sbs.UsageError):
    sbs.parse_cores('x')
  with pytest.raises(sbs.UsageError):
    sbs.parse_cores('100000')


def _run(*args):
  return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                        timeout=120, check=False)


def test_missing_authors_code_is_a_one_line_error(tmp_path):
  for args in ([], [f'--authors_code={tmp_path / "nope"}']):
    proc = _run(*args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith('error: ')
    assert 'git clone https://github.com/JRC1995/MonotonicLocationAttention' in lines[0]
  # A folder that is not their checkout.
  proc = _run(f'--authors_code={tmp_path}')
  assert proc.returncode == 2
  assert 'missing configs/configLoader.py' in proc.stderr


def _fake_checkout(root: pathlib.Path) -> pathlib.Path:
  for f in sbs.AUTHORS_FILES:
    (root / f).parent.mkdir(parents=True, exist_ok=True)
    (root / f).write_text('')
  return root


def test_checkout_without_its_python_is_a_one_line_error(tmp_path):
  root = _fake_checkout(tmp_path / 'refcode')
  proc = _run(f'--authors_code={root}')
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and lines[0].startswith('error: ')
  assert '.venv/bin/python' in lines[0] and 'pip install torch' in lines[0]
  # A Python that cannot import torch.
  py = root / '.venv' / 'bin' / 'python'
  py.parent.mkdir(parents=True)
  py.write_text('#!/bin/sh\necho "ModuleNotFoundError: No module named torch" >&2\nexit 1\n')
  py.chmod(py.stat().st_mode | stat.S_IXUSR)
  proc = _run(f'--authors_code={root}')
  assert proc.returncode == 2
  lines = proc.stderr.strip().splitlines()
  assert len(lines) == 1 and 'cannot import torch' in lines[0]


def test_bad_numeric_flags_are_usage_errors():
  with pytest.raises(sbs.UsageError, match='--target_ratio must be above 0'):
    sbs.parse_args(['--target_ratio=0'])
  with pytest.raises(sbs.UsageError, match='--rounds must be at least 1'):
    sbs.parse_args(['--rounds=0'])
  assert sbs.parse_args([]).target_ratio == 12.0
