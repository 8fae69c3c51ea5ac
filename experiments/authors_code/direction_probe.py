"""Probes a trained unit of the authors' code: accuracy, direction gate and location steps.

For one unit of `run.py` (a copy of the authors' checkout that trained on our data,
`<workdir>/<task>.<variant>.<tag>.seed<k>/`), this script builds the model exactly as
their `train.py` does (their argparse defaults, `configs.configLoader.load_config` for
the unit's dataset and model, `utils.data_utils.load_data` for the vocabulary from the
unit's `metadata.pkl`, `seq2seq_framework`), loads the best-dev weights
`inference_weights/<dataset>_<model>_seq2seq/<k>.pt`, and runs their test path
(`config['generate'] = True`, `seq2seq_agent.run(batch, train=False)` under no_grad:
eval mode, greedy decoding up to the batch's padded target length) on the first --size
samples of the dev split and of every test split listed in `metadata.pkl`. It records

  acc     exact-match accuracy (their `seq2seq_agent.evaluate`), in %. NB: during
          training their dev metric is teacher-forced; here every split is greedy.
  alpha   the direction gate of their `GRUEncoderDecoder.forward`,
          g = sigmoid(5 * dir_gater(hn)), hn the final forward/backward encoder states
          (the paper's Eq. 17-18); the decoder attends over g * forward + (1 - g) *
          reversed encodings, so alpha ~ 1 reads the source forwards, ~ 0 reversed.
          Captured with a forward hook on `dir_gater`.
  steps   for location attention (their `score_positions`, wrapped per instance):
          step_t = (mu_t - p_{t-1}) / step_size, in input positions, where mu_t is the
          Gaussian's centre and p_{t-1} the previous attended (expected) position
          (0 at t = 0); for OneStep-family models this is their step ('free': rho).
          Over the target steps of each sample (its <eos> included): `peak` = the mean
          of max_t mu_t (where the jump lands; compare with `len`, the mean source
          length), `step` / `sd` / `<0` = mean, sd and fraction negative of the steps
          after that peak.
  mu      the first sample's mu_t per output step, in positions of the (mixed)
          augmented sequence: 0 = START, 1..n = source tokens, n + 1 = END; in the
          reversed frame (alpha ~ 0) position 1 holds the LAST source token.

Run (with a Python that has torch, e.g. the authors' virtualenv; writes nothing):
  ../refcode/.venv/bin/python experiments/authors_code/direction_probe.py \
      --unit=../refruns/reverse_copy.onestep_minus_sigmoid.paper.seed0 [--size=200]
"""

import argparse
import pathlib
import pickle
import re
import sys


def build(unit: pathlib.Path, batch_size: int, size: int):
  """Their config, data (first `size` samples per split), model and agent for the unit."""
  sys.dont_write_bytecode = True            # leave the unit's copy of their code untouched
  sys.path.insert(0, str(unit))
  import torch
  from argparser import get_args
  from configs.configLoader import load_config
  from utils.data_utils import load_data
  from models import seq2seq_framework
  from agents import seq2seq_agent

  (dataset,) = [p.name for p in (unit / 'processed_data').iterdir() if p.is_dir()]
  (weights_dir,) = list((unit / 'inference_weights').iterdir())
  model_name = weights_dir.name[len(dataset) + 1:-len('_seq2seq')]
  seed = int(re.search(r'seed(\d+)$', unit.name).group(1))
  args = get_args().parse_args(['--model', model_name, '--dataset', dataset,
                                '--device', 'cpu', '--test', '--limit', str(size)])
  config = load_config(args)
  config['device'] = torch.device('cpu')
  data_dir = unit / 'processed_data' / dataset
  with open(data_dir / 'metadata.pkl', 'rb') as f:
    metadata = pickle.load(f)
  paths = {'train': data_dir / 'train.jsonl',   # what their load_paths builds
           'dev': {k: data_dir / f'dev_{k}.jsonl' for k in metadata['dev_keys']},
           'test': {k: data_dir / f'test_{k}.jsonl' for k in metadata['test_keys']}}
  data, config = load_data(paths, metadata, args, config)
  config['dev_batch_size'] = batch_size
  config['generate'] = True                  # their train.py, test branch
  model = seq2seq_framework(data=data, config=config)
  ckpt = torch.load(weights_dir / f'{seed}.pt', map_location='cpu', weights_only=True)
  model.load_state_dict(ckpt['model_state_dict'])
  model.eval()
  agent = seq2seq_agent(model=model, config=config, device=torch.device('cpu'))
  return config, data, model, agent, dict(dataset=dataset, model=model_name, seed=seed,
                                          best_epoch=ckpt['epochs'])


class Probe:
  """Hooks on their modules: the direction gate and the location attention's mu."""

  def __init__(self, model):
    import torch
    self.torch = torch
    ed = model.encoder_decoder
    self.alpha, self.calls = [], []
    if hasattr(ed, 'dir_gater'):
      ed.dir_gater.register_forward_hook(
          lambda mod, inp, out: self.alpha.append(torch.sigmoid(5 * out).view(-1)))
    attn = ed.attention_layer
    self.location = hasattr(attn, 'score_positions')
    if self.location:
      original = attn.score_positions

      def wrapped(**kw):
        scores, state, mu = original(**kw)
        past = kw['past_attention']
        past = torch.zeros_like(mu) if past is None else past
        size = kw['step_size']                                     # 1 / (L - 1)
        self.calls.append(dict(
            mu=(mu / size).mean(1).flatten(),                          # [N], positions
            step=((mu - past) / size).mean(1).flatten()))
        return scores, state, mu
      attn.score_positions = wrapped

  def reset(self):
    self.alpha.clear()
    self.calls.clear()

  def steps(self, trg_lens):
    """Per row: the mu trajectory and the step sizes over its target steps."""
    if not self.calls:
      return None
    mu = self.torch.stack([c['mu'] for c in self.calls], 1)      # [N, T]
    st = self.torch.stack([c['step'] for c in self.calls], 1)
    return [(mu[i, :n].tolist(), st[i, :n].tolist()) for i, n in enumerate(trg_lens)]


def run_split(agent, probe, loader):
  import torch
  rows = []
  with torch.no_grad():
    for batches in loader:
      for batch in batches:
        probe.reset()
        item = agent.run(batch, train=False)
        preds, golds = item['display_items']['predictions'], batch['trg']
        alpha = probe.alpha[0].tolist() if probe.alpha else [float('nan')] * len(golds)
        steps = probe.steps([len(g) for g in golds]) or [None] * len(golds)
        for p, g, src, a, s in zip(preds, golds, batch['src'], alpha, steps):
          ok = agent.evaluate([p], [list(g)])['correct_predictions'] == 1
          rows.append(dict(ok=ok, alpha=a, steps=s, n_src=len(src)))
  return rows


def fmt(x, spec='.3f'):
  return 'n/a' if x is None or x != x else format(x, spec)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--unit', required=True, help='a unit folder of run.py')
  parser.add_argument('--size', type=int, default=200, help='first samples of each split')
  parser.add_argument('--batch', type=int, default=64, help='their dev_batch_size here')
  args = parser.parse_args()
  unit = pathlib.Path(args.unit).resolve()
  import torch
  torch.set_num_threads(1)
  config, data, model, agent, info = build(unit, args.batch, args.size)
  from collaters import seq2seq_collater
  from utils.data_utils import load_dataloaders
  probe = Probe(model)
  collater = seq2seq_collater(PAD=data['PAD_id'], config=config, train=False)
  loaders = load_dataloaders(train_batch_size=args.batch, dev_batch_size=args.batch,
                             partitions=data, train_collater_fn=collater.collate_fn,
                             dev_collater_fn=collater.collate_fn, num_workers=0)
  print(f"unit {unit.name}: dataset {info['dataset']}, model {info['model']}, "
        f"time/seed {info['seed']}, best-dev epoch {info['best_epoch']}, "
        f"attention {config['attention_type']}, step_act {config.get('step_act', '-')}; "
        'greedy decoding (their test path)')
  head = (f"{'split':12s} {'n':>4s} {'acc%':>6s} {'alpha mean':>10s} {'min':>6s} {'max':>6s} "
          f"{'>0.5':>5s} {'len':>6s} {'peak':>6s} {'step':>6s} {'sd':>5s} {'<0':>5s}")
  print(head)
  print('-' * len(head))
  firsts = []
  splits = [('dev_' + k, l) for k, l in loaders['dev'].items()] + \
           [('test_' + k, l) for k, l in loaders['test'].items()]
  for name, loader in splits:
    rows = run_split(agent, probe, loader)
    n = len(rows)
    alpha = torch.tensor([r['alpha'] for r in rows])
    acc = 100 * sum(r['ok'] for r in rows) / n
    length = sum(r['n_src'] for r in rows) / n
    peak = step = sd = neg = None
    if probe.location:
      peaks, after = [], []
      for r in rows:
        mu, st = r['steps']
        k = max(range(len(mu)), key=mu.__getitem__)
        peaks.append(mu[k])
        after += st[k + 1:]
      after = torch.tensor(after)
      peak, step, sd = sum(peaks) / n, after.mean().item(), after.std().item()
      neg = (after < 0).float().mean().item()
    print(f"{name:12s} {n:4d} {acc:6.1f} {fmt(alpha.mean().item()):>10s} "
          f"{fmt(alpha.min().item()):>6s} {fmt(alpha.max().item()):>6s} "
          f"{fmt((alpha > 0.5).float().mean().item(), '.2f'):>5s} {length:6.1f} "
          f"{fmt(peak, '.2f'):>6s} {fmt(step, '.2f'):>6s} {fmt(sd, '.2f'):>5s} "
          f"{fmt(neg, '.2f'):>5s}")
    # The split's first sample alone, for its trajectory.
    split, key = name.split('_', 1)
    sample = data[split][key][0]
    probe.reset()
    with torch.no_grad():
      item = agent.run(collater.collate_fn([sample])[0], train=False)
    ok = agent.evaluate(item['display_items']['predictions'], [list(sample['trg'])])
    traj = probe.steps([len(sample['trg'])])
    firsts.append((name, len(sample['src']), probe.alpha[0].item() if probe.alpha else None,
                   ok['correct_predictions'] == 1, traj[0] if traj else None))
  print("\n'>0.5': fraction with alpha > 0.5; len: mean source length; peak: mean max_t mu_t; "
        'step / sd / <0: the steps after the peak (input positions).')
  print('\nFirst sample of each split: mu_t (positions; 0 = START, 1..n tokens, n+1 = END)')
  for name, n_src, a, ok, traj in firsts:
    mus = ' '.join(f'{m:.1f}' for m in traj[0]) if traj else 'n/a'
    print(f"{name} (n={n_src}, alpha={fmt(a)}, {'correct' if ok else 'wrong'}): {mus}")


if __name__ == '__main__':
  main()
