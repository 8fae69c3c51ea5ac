"""The library's one exception type.

Every user-facing failure (unknown names, bad data, bad flag values, NaN losses,
corrupt checkpoints) raises `MonolocError` with a one-line message. It subclasses
`ValueError` so that callers can also catch it as such; the command-line entry
points catch it and print the message instead of a traceback.
"""


class MonolocError(ValueError):
  """A clear, one-line, user-facing error."""


class WorkdirInUse(MonolocError):
  """The workdir is locked by another live process (`rundir.lock`)."""


def unknown_name(kind: str, name: str, valid) -> MonolocError:
  """Builds the standard 'unknown X' error that lists the valid choices."""
  return MonolocError(
      f"unknown {kind} {name!r}; valid {kind}s: {', '.join(sorted(valid))}")
