"""Changing GPU settings and putting them back: one package for the training process and the node agent.

Every change of a GPU setting (power limit, locked SM clocks) is recorded first, in memory and in a small
on-disk journal, and restored on every exit path: a normal end, an exception, SIGTERM/SIGINT, and after a
SIGKILL or a power loss at the next start (`wattwise restore` does it by hand).

- `locks`: one holder per GPU among wattwise processes (flock on a file per device), shared by the guards
  of one process;
- `journal`: the journal's format, its trust checks (owner, no symbolic link, each field validated), and
  its atomic writing;
- `apply`: the one way to set, read and describe a recorded setting;
- `recovery`: putting back what a dead process left changed, and reporting leftovers;
- `guard`: `SettingsGuard`, through which a training process changes settings.

The node agent (`wattwise.agent`) records the originals of the GPUs it lends in the same journal format,
checked and written by `journal`, and restores them with the same `apply` code; its journal, once the
agent is gone, is one that `recovery` restores too.
"""
