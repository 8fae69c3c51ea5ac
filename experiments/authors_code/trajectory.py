"""Both codes' first training steps from the same weights, on the same batches.

The fixtures of model_step.py check one update at a tiny size. This follows a
whole epoch at the paper's size, in two steps:

1. `authors` (run it with their virtualenv's Python): builds their model for
   --model on --dataset exactly as their train.py does for seed --time (the same
   torch seed, so the same initial weights as their real run), draws their first
   epoch's batches from their own shuffled DataLoader and collater, and trains
   --steps updates as their Trainer does (`agent.run`, `backward`, `step`:
   clip 5, AdamW 1e-3). With --dropout=0.5 (their config's) and nothing else
   drawn, this is their real run's first epoch, update for update; --dropout=0
   takes every random draw out of training. It writes --trace: their initial
   state_dict, every update's batch (the rows' tokens) and loss, and their dev
   accuracy (teacher-forced, their metric) every --eval_every updates.
2. `ours` (this repository's virtualenv): maps those initial weights into this
   library's parameters (weights.py), runs this library's train step
   (`train.make_train_programs`, the `authors_code` recipe) on the same batches
   in the same order, and scores dev accuracy the same way at the same updates.
   It prints both trajectories side by side and writes --out (JSON).

  ../refcode/.venv/bin/python experiments/authors_code/trajectory.py authors \\
      --refcode=../refcode --data=../refruns/inv_reverse_recopy.mono.paper.seed0/processed_data/rgc \\
      --dataset=rgc --model=BiGRU_MonoAttn --time=0 --dropout=0 --trace=/tmp/irr0.npz
  .venv/bin/python experiments/authors_code/trajectory.py ours --variant=mono \\
      --data=../refruns/inv_reverse_recopy.mono.paper.seed0/processed_data/rgc \\
      --trace=/tmp/irr0.npz --out=/tmp/irr0.json

--data is a processed_data/<dataset> folder as export_data.py writes it (every
unit folder of run.py has one). The `ours` side reads the model's sizes off their
arrays (`sizes_of`), so a trace of any size works. Our batches are padded to the widest batch of the
trace (one compiled program; padding carries no loss and is masked), and the
epoch's last, partial batch is completed with rows that carry no loss, as this
library's input pipeline does.
"""

import argparse
import json
import pathlib
import pickle
import random
import sys
import time
import zlib

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
SEP = '\x1f'


def read_jsonl(path: pathlib.Path):
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


# ---------------------------------------------------------------------- theirs
def their_dev_accuracy(agent, loader) -> float:
  """Their validation: teacher-forced argmax, exact match up to <eos>, in percent."""
  import torch
  correct = total = 0
  with torch.no_grad():
    for batches in loader:
      for batch in batches:
        metrics = agent.run(batch, train=False)['metrics']
        correct += metrics['correct_predictions']
        total += metrics['total']
  return 100.0 * correct / total


def run_authors(args):
  sys.path.insert(0, str(pathlib.Path(args.refcode).resolve()))
  import torch
  from torch.utils.data import DataLoader
  from agents import seq2seq_agent
  from collaters import seq2seq_collater
  from models import seq2seq_framework
  from utils.data_utils import Dataset
  import model_step

  torch.set_num_threads(1)
  data = pathlib.Path(args.data)
  with open(data / 'metadata.pkl', 'rb') as f:
    vocab2idx = pickle.load(f)['vocab2idx']
  config = model_step.full_config(args.dataset, args.model, vocab2idx)
  config['dropout'] = args.dropout
  config['device'] = torch.device('cpu')
  # train.py: the seed of run `time`, then the model, then the agent and collaters.
  seed = zlib.adler32(f'{args.dataset}_{args.model}_seq2seq_{args.time}'.encode())
  torch.manual_seed(seed)
  random.seed(seed)
  np.random.seed(seed)
  model = seq2seq_framework(data=None, config=config)
  skip = lambda name: 'relative_position_embed' in name or 'embed_positions' in name
  before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items() if not skip(k)}
  agent = seq2seq_agent(model=model, config=config, device=torch.device('cpu'))
  train_collater = seq2seq_collater(PAD=vocab2idx['<pad>'], config=config, train=True)
  dev_collater = seq2seq_collater(PAD=vocab2idx['<pad>'], config=config, train=False)
  train = {i: s for i, s in enumerate(read_jsonl(data / 'train.jsonl'))}
  dev = {i: s for i, s in enumerate(read_jsonl(data / 'dev_normal.jsonl'))}
  dev_loader = DataLoader(Dataset(dev), batch_size=config['dev_batch_size'], shuffle=False,
                          collate_fn=dev_collater.collate_fn)
  train_loader = DataLoader(Dataset(train), batch_size=config['train_batch_size'],
                            shuffle=True, collate_fn=train_collater.collate_fn)

  srcs, trgs, sizes, losses, dev_at, dev_acc = [], [], [], [], [], []
  grads_seen = set()
  start = time.time()
  step = 0
  for batches in train_loader:        # their Trainer.run, one update per 32 samples
    for batch in batches:
      srcs += [SEP.join(s) for s in batch['src']]
      trgs += [SEP.join(t) for t in batch['trg']]
      sizes.append(batch['batch_size'])
      item = agent.run(batch, train=True)
      accu_step = config['batch_size'] // batch['batch_size']
      agent.backward(item['loss'] / accu_step)
      grads_seen |= {n for n, p in model.named_parameters() if p.grad is not None}
      agent.step()
      losses.append(float(item['loss'].item()))
      step += 1
      if step % args.eval_every == 0 or step == args.steps:
        dev_at.append(step)
        dev_acc.append(their_dev_accuracy(agent, dev_loader))
        print(f'step {step:4d}  loss {np.mean(losses[-args.eval_every:]):.4f}  '
              f'dev {dev_acc[-1]:.2f}%  {time.time() - start:.0f}s', flush=True)
    if step >= args.steps:
      break
  names = list(before)
  unused = [n.removeprefix('encoder_decoder.') for n in names
            if n in dict(model.named_parameters()) and n not in grads_seen]
  unused += [n.removeprefix('encoder_decoder.') for n in names
             if n not in dict(model.named_parameters())]          # buffers
  vocab = [t for t, _ in sorted(vocab2idx.items(), key=lambda kv: kv[1])]
  np.savez_compressed(
      args.trace, names=np.array(names),
      shapes=np.array([','.join(map(str, before[k].shape)) for k in names]),
      before=np.concatenate([before[k].astype(np.float32).reshape(-1) for k in names]),
      unused=np.array(sorted(set(unused))), vocab=np.array(vocab), src=np.array(srcs),
      trg=np.array(trgs), sizes=np.array(sizes), losses=np.array(losses),
      dev_at=np.array(dev_at), dev_acc=np.array(dev_acc), dropout=np.float64(args.dropout),
      their_model=np.array(args.model), dataset=np.array(args.dataset),
      time=np.int64(args.time), torch_version=np.array(torch.__version__))
  print(f'wrote {args.trace}: {step} updates, mean loss {np.mean(losses):.6f}', flush=True)


# ------------------------------------------------------------------------ ours
def sizes_of(theirs) -> dict:
  """Our size fields of their model, by path, read off their arrays' shapes."""
  sizes = {'gru.embed_dim': theirs['embed_layer.weight'].shape[1],
           'hidden_dim': theirs['decodercell.weight_hh'].shape[1],
           'gru.value_dim': theirs['value_transform.weight'].shape[0]}
  if 'attention_layer.query_linear.weight' in theirs:
    sizes['qk_dim'] = theirs['attention_layer.query_linear.weight'].shape[0]
  return {k: int(v) for k, v in sizes.items()}


def run_ours(args):
  sys.path.insert(0, str(REPO))
  sys.path.insert(0, str(HERE))
  import jax
  import jax.numpy as jnp
  from monoloc_jax import inference
  from monoloc_jax import input_pipeline as ip
  from monoloc_jax import backbones
  from monoloc_jax import config_paths
  from monoloc_jax import train as train_lib
  from monoloc_jax.configs import authors_code
  from monoloc_jax.vocab import Vocabulary
  import weights

  d = dict(np.load(args.trace))
  their_vocab = [str(t) for t in d['vocab']]
  vocab = Vocabulary.from_tokens(t for t in their_vocab if not t.startswith('<'))
  perm = weights.vocab_perm(their_vocab, vocab.tokens)
  theirs = weights.unflatten(d['before'], d['names'], d['shapes'])
  params = weights.to_ours(theirs, perm, skip=[str(n) for n in d['unused']])

  c = authors_code.get_config()
  c.update(variant=args.variant, dropout=float(d['dropout']))
  config_paths.overridden(c, sizes_of(theirs))
  model = backbones.from_config(c, vocab)
  ids = lambda tokens: [vocab.id_of(t) for t in tokens]

  def encode(rows_src, rows_trg, width_src, width_trg, rows):
    src = np.zeros((rows, width_src), np.int32)
    tgt_out = np.zeros((rows, width_trg), np.int32)
    src_len = np.zeros((rows,), np.int32)
    for b, (s, t) in enumerate(zip(rows_src, rows_trg)):
      src[b, :len(s)], tgt_out[b, :len(t)], src_len[b] = ids(s), ids(t), len(s)
    for b in range(len(rows_src), rows):    # filler rows: a real source, no target tokens
      src[b], src_len[b] = src[0], src_len[0]
    tgt_in = np.concatenate([np.full((rows, 1), vocab.sos_id, np.int32), tgt_out[:, :-1]], 1)
    return ip.Batch(src, src_len, tgt_in, tgt_out)

  src_rows = [str(s).split(SEP) for s in d['src']]
  trg_rows = [str(t).split(SEP) for t in d['trg']]
  ws, wt = max(map(len, src_rows)), max(map(len, trg_rows))
  bounds = np.concatenate([[0], np.cumsum(d['sizes'])])
  batch_size = int(d['sizes'].max())
  dev = read_jsonl(pathlib.Path(args.data) / 'dev_normal.jsonl')
  dev_src, dev_trg = [r['src'] for r in dev], [r['trg'] for r in dev]
  dws, dwt = max(map(len, dev_src)), max(map(len, dev_trg))
  dev_batch = encode(dev_src, dev_trg, dws, dwt, len(dev))

  tx = train_lib.make_optimizer(c)
  programs = train_lib.make_train_programs(model, tx)
  one = lambda tree: jax.tree_util.tree_map(lambda x: jnp.asarray(x)[None], tree)
  key = jax.random.split(jax.random.PRNGKey(args.seed))[1]      # as create_train_state
  state = train_lib.TrainState(one(params), one(tx.init(params)), jnp.zeros((1,), jnp.int32),
                               key[None])

  teacher_forced = inference.make_eval_programs(model).teacher_forced_accuracy
  losses, dev_acc = [], []      # losses: device scalars, read at each dev evaluation
  dev_at = [int(s) for s in d['dev_at']]
  start = time.time()
  for step in range(len(d['sizes'])):
    lo, hi = bounds[step], bounds[step + 1]
    batch = encode(src_rows[lo:hi], trg_rows[lo:hi], ws, wt, batch_size)
    state, stats = programs.train_step(state, one(batch), train_lib.EpochStats.zeros(1))
    losses.append(stats.loss_sum[0] / stats.tokens[0])
    if step + 1 in dev_at:
      losses = [float(x) for x in losses]
      dev_acc.append(100.0 * float(np.mean(teacher_forced(state.params, dev_batch))))
      i = dev_at.index(step + 1)
      print(f'step {step + 1:4d}  loss ours {np.mean(losses[-args.eval_every:]):.4f} '
            f'theirs {np.mean(d["losses"][max(0, step + 1 - args.eval_every):step + 1]):.4f}'
            f'  dev ours {dev_acc[-1]:.2f}% theirs {float(d["dev_acc"][i]):.2f}%'
            f'  {time.time() - start:.0f}s', flush=True)
  theirs_loss = np.asarray(d['losses'], np.float64)
  ours_loss = np.asarray([float(x) for x in losses])
  rel = np.abs(ours_loss - theirs_loss) / theirs_loss
  first_apart = int(np.argmax(rel > args.apart)) + 1 if (rel > args.apart).any() else None
  out = {
      'trace': str(args.trace), 'variant': args.variant, 'their_model': str(d['their_model']),
      'dataset': str(d['dataset']), 'time': int(d['time']), 'dropout': float(d['dropout']),
      'updates': len(losses), 'loss_ours': ours_loss.tolist(),
      'loss_theirs': theirs_loss.tolist(), 'dev_at': dev_at, 'dev_ours': dev_acc,
      'dev_theirs': [float(x) for x in d['dev_acc']],
      'first_update_apart': first_apart, 'apart_threshold': args.apart,
  }
  print(f'loss relative difference: first update {rel[0]:.2e}, max over the first 10 '
        f'{rel[:10].max():.2e}, first update above {args.apart:g}: {first_apart}; '
        f'epoch mean loss ours {ours_loss.mean():.4f} theirs {theirs_loss.mean():.4f}',
        flush=True)
  if args.out:
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1) + '\n')


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('side', choices=('authors', 'ours'))
  parser.add_argument('--data', required=True, help='a processed_data/<dataset> folder')
  parser.add_argument('--trace', required=True, help='the authors side\'s .npz')
  parser.add_argument('--refcode', default=str(REPO.parent / 'refcode'))
  parser.add_argument('--dataset', default='rgc', help='their --dataset name')
  parser.add_argument('--model', default='BiGRU_MonoAttn', help='their --model name')
  parser.add_argument('--time', type=int, default=0, help='their seed index (--initial_time)')
  parser.add_argument('--dropout', type=float, default=0.0)
  parser.add_argument('--steps', type=int, default=313, help='updates (an epoch: 313)')
  parser.add_argument('--eval_every', type=int, default=50)
  parser.add_argument('--variant', default='mono', help='our variant slug (ours side)')
  parser.add_argument('--seed', type=int, default=0, help='our dropout seed (ours side)')
  parser.add_argument('--apart', type=float, default=1e-3,
                      help='relative loss difference reported as "apart" (ours side)')
  parser.add_argument('--out', default='', help='JSON of both trajectories (ours side)')
  args = parser.parse_args()
  if not (pathlib.Path(args.data) / 'train.jsonl').is_file():
    sys.exit(f'error: --data {args.data} has no train.jsonl; give a processed_data/<dataset> '
             'folder as export_data.py writes it')
  if args.side == 'authors' and not (pathlib.Path(args.refcode) / 'train.py').is_file():
    sys.exit(f'error: --refcode {args.refcode} is not a checkout of the authors\' code')
  if args.side == 'ours' and not pathlib.Path(args.trace).is_file():
    sys.exit(f'error: --trace {args.trace} does not exist; run the authors side first')
  (run_authors if args.side == 'authors' else run_ours)(args)


if __name__ == '__main__':
  main()
