"""XLA options that make the tests' small programs compile fast, where they apply.

The tests are compile-bound on CPU, not run-bound, so several of them compile with
XLA:CPU's cheap settings. Those options belong to XLA:CPU (and its LLVM backend):
a GPU's compiler rejects them (`INVALID_ARGUMENT: No such compile option:
'xla_cpu_use_fusion_emitters'`, seen on an H100, MEASUREMENTS.md §7), so elsewhere
the tests compile with the backend's defaults.
"""

from typing import Dict, Optional, Union

import jax

CPU_FAST: Dict[str, Union[int, bool]] = {
    'xla_backend_optimization_level': 0,
    'xla_llvm_disable_expensive_passes': True,
    # XLA:CPU's fusion emitters off: these programs compile about 2.5x faster without them.
    'xla_cpu_use_fusion_emitters': False,
}


def fast(backend: Optional[str] = None) -> Dict[str, Union[int, bool]]:
  """`compiler_options` for jax.jit: CPU_FAST on the CPU backend, none elsewhere."""
  return dict(CPU_FAST) if (backend or jax.default_backend()) == 'cpu' else {}
