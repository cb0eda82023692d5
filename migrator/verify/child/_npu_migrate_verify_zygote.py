"""The parent of a verification's program processes: it imports torch once, then forks each one.

Every process of a side would otherwise pay for ``import torch`` and for ``torch._dynamo``, which
torch imports the first time an optimizer is built (``Optimizer.__init__`` is wrapped in
``torch._disable_dynamo``): about three seconds of CPU each, most of a small program's run.
``npu-migrate verify`` starts this script with the environment its programs share (``PYTHONPATH``
with the probe, the hash seed, one thread), waits for ``ready``, then writes one request per
process on its standard input, a JSON line::

    {"argv": ["/path/train.py", "--lr", "0.1"], "cwd": "/path", "env": {...}, "log": "/tmp/..."}

For each request it forks a child, which becomes ``python /path/train.py --lr 0.1`` run in
``cwd`` with ``env`` as its whole environment, its standard input empty, its output and errors
in ``log``, and the recording probe installed as ``sitecustomize`` would install it. It answers
``started PID`` at once and ``ended PID CODE`` when the child ends (``CODE`` as
:attr:`subprocess.Popen.returncode` gives it: negative for a signal). It leaves when its input
closes and its children have ended.

The child runs the program as ``python`` would: ``sys.argv``, ``sys.path[0]`` (the script's
folder), ``__main__``, the interpreter's exit (``atexit`` handlers, the probe's last record,
the exit code of ``sys.exit`` or of an uncaught exception). What differs is what the parent
imported before the fork, which is what the program imports first anyway.
"""

from __future__ import annotations

import json
import os
import runpy
import selectors
import sys
import time
from typing import Any


def _prepare() -> None:
    import torch
    import torch._dynamo  # noqa: F401


def _serve() -> dict[str, Any]:
    """Fork a child per request; return a request only in that request's child."""
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending = b""
    children: set[int] = set()
    closed = False
    while not (closed and not children):
        if closed:
            time.sleep(0.05)  # the last children are ending
        elif selector.select(timeout=0.05):
            chunk = os.read(0, 1 << 16)
            closed = not chunk
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in filter(None, lines):
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    return dict(request)
                children.add(pid)
                _say(f"started {pid}")
        while children:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            children.discard(pid)
            _say(f"ended {pid} {os.waitstatus_to_exitcode(status)}")
    os._exit(0)


def _say(message: str) -> None:
    sys.stdout.write(message + "\n")
    sys.stdout.flush()


def _become(request: dict[str, Any]) -> str:
    """Turn this forked child into the program's process; the script to run."""
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(empty)
    os.close(log)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = os.path.abspath(request["argv"][0])
    sys.argv = [request["argv"][0], *request["argv"][1:]]
    sys.path[0] = os.path.dirname(script)
    if os.environ.get("NPU_MIGRATE_VERIFY_RECORDS"):
        import _npu_migrate_verify_probe

        _npu_migrate_verify_probe.install()
    return script


def main() -> None:
    _prepare()
    _say("ready")
    script = _become(_serve())
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
