"""``python -m migrator`` and the ``npu-migrate`` command.

Nothing heavy is imported at module level: a pool worker (multiprocessing's ``spawn``) runs
the command's script again, as ``__mp_main__``, before it can notice that its parent died, so
this module must stay as cheap to import as the interpreter's start."""

from __future__ import annotations

import sys


def main() -> int:
    from migrator.cli import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
