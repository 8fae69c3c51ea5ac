"""Same-run A/B of the sharded train step against the plain vmapped one (BUILD_NOTES §4.7).

  XLA_FLAGS=--xla_force_host_platform_device_count=2 python experiments/sharding_overhead.py

Times `steps` train steps of the paper's small model (Reverse Copy, OneStepAttn,
batch 32) for 2 seeds on 1 device, 2 seeds on 2 devices (mesh seed=2 x data=1)
and 1 seed on 1 and on 2 devices (seed=1 x data=2, batch rows split), interleaving the
variants round by round so that load from other processes hits all of them.
Prints the per-step milliseconds of every round and their median and spread.
"""

import json
import sys
import time

import jax
import numpy as np

sys.path.insert(0, __file__.rsplit('/experiments/', 1)[0])
from monoloc_jax import input_pipeline as ip  # pylint: disable=wrong-import-position
from monoloc_jax import backbones  # pylint: disable=wrong-import-position
from monoloc_jax import sharding  # pylint: disable=wrong-import-position
from monoloc_jax import train  # pylint: disable=wrong-import-position
from monoloc_jax.configs import default  # pylint: disable=wrong-import-position


def main(rounds: int = 15, steps: int = 20) -> None:
  config = default.get_config()
  config.update(task='reverse_copy', variant='onestep', train_size=2000, eval_size=16,
                test_splits='test_15', bucket_batches=False)
  data = ip.load_data(config)
  model = backbones.from_config(config, data.vocab)
  variants = {'2 seeds, 1 device': (2, jax.devices()[:1]),
              '2 seeds, 2 devices (seed=2)': (2, None),
              '1 seed, 1 device': (1, jax.devices()[:1]),
              '1 seed, 2 devices (data=2)': (1, None)}
  setups = {}
  for name, (n, devices) in variants.items():
    programs = train.make_train_programs(model, train.make_optimizer(config))
    placement = sharding.plan(n, config.batch_size, devices)
    batches = list(ip.train_batches(data.train, config.batch_size, list(range(n)), 0,
                                    config.data_seed, data.vocab.sos_id, False))[:steps]
    state = placement.put_state(train.create_train_state(programs, list(range(n)), batches[0]))
    batches = [placement.put_batch(b) for b in batches]
    stats = placement.put_state(train.EpochStats.zeros(n))
    state, stats = programs.train_step(state, batches[0], stats)      # compile
    jax.block_until_ready(stats)
    setups[name] = [programs, state, stats, batches, placement.describe()]
  times = {name: [] for name in setups}
  for _ in range(rounds):
    for name, setup in setups.items():
      programs, state, stats, batches, _ = setup
      t0 = time.perf_counter()
      for b in batches:
        state, stats = programs.train_step(state, b, stats)
      jax.block_until_ready(stats)
      times[name].append(1000 * (time.perf_counter() - t0) / len(batches))
      setup[1], setup[2] = state, stats
  for name, ms in times.items():
    ms = np.array(ms)
    print(f'{name:<30} median {np.median(ms):6.1f} ms/step  min {ms.min():6.1f}  '
          f'max {ms.max():6.1f}  [{setups[name][4]}]')
  print(json.dumps({k: [round(x, 2) for x in v] for k, v in times.items()}))


if __name__ == '__main__':
  main()
