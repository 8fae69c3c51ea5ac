"""Ctrl-C for the command-line tools, in place before anything heavy is imported.

`monoloc-train` starts here (`run`), so that a SIGINT at any moment, even while
jax is still being imported, ends the process with one line and exit code 130.
Only the standard library is imported by this module.
"""

import os
import signal
import sys
import threading

INTERRUPTED = 'interrupted; rerun the same command to resume from the last checkpoint'
_WATCHER = 'monoloc-sigint'


def exit_interrupted() -> None:
  """One line on stderr and exit code 130, at once.

  The process ends as if killed: every workdir file is written atomically and a
  checkpoint counts only once its manifest exists, so the next run resumes from
  the last complete epoch (tests/workdir_test.py kills a run at every phase to
  prove it). Exiting at once, rather than unwinding, also stops a long XLA
  compile and leaves no thread behind to print a traceback.
  """
  try:
    sys.stdout.flush()
    os.write(2, f'{INTERRUPTED}\n'.encode())
  finally:
    os._exit(130)  # pylint: disable=protected-access


def stop_on_interrupt() -> None:
  """Routes SIGINT to `exit_interrupted` for this command-line process (idempotent).

  SIGINT is blocked in the calling (main) thread, and so in every thread started
  later, and a watcher thread waits for it with `sigwait`: it acts even while the
  main thread is inside a long C++ call. The Python-level handler covers threads
  that existed before.
  """
  if any(t.name == _WATCHER for t in threading.enumerate()):
    return
  signal.signal(signal.SIGINT, lambda signum, frame: exit_interrupted())
  signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})

  def watch() -> None:
    signal.sigwait({signal.SIGINT})
    exit_interrupted()

  threading.Thread(target=watch, name=_WATCHER, daemon=True).start()


def list_flags_in_help(module_name: str) -> None:
  """Makes `--help` of a console script list the flags that `module_name` defines.

  absl's --help shows the key flags of the module named by sys.argv[0]; for a console
  script that is the generated wrapper, which defines none ("Try --helpfull").
  """
  from absl import flags  # pylint: disable=g-import-not-at-top
  for flag in flags.FLAGS.get_flags_for_module(module_name):
    flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run() -> None:
  """The `monoloc-train` console script."""
  stop_on_interrupt()
  from monoloc_jax import main  # pylint: disable=g-import-not-at-top
  main.run()
