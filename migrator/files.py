"""Writing results: atomic replacement, unified diffs, and the rest of an ``--output`` copy."""

from __future__ import annotations

import contextlib
import os
import shutil

from migrator.notebooks import is_notebook, notebook_diff
from migrator.source import decode

TEMP_SUFFIX = ".npu-migrate-tmp"


def write_atomic(path: str, data: bytes, mode_bits: int) -> None:
    """Replace ``path`` by ``data`` through a temporary file in the same folder and a rename.

    A reader, or a run killed at any moment, sees the old file or the new one, never a part of
    one. Replacing the directory entry also means a symlink at ``path`` is replaced, not written
    through.
    """
    folder, name = os.path.split(path)
    while True:
        # The name is chosen before the file exists, so a Ctrl-C that lands right after the
        # file is created (inside ``open``, before its result is stored) still knows what to
        # remove; ``tempfile.mkstemp`` gives the name only once the file exists.
        temporary = os.path.join(folder or ".", f".{name}.{os.urandom(6).hex()}{TEMP_SUFFIX}")
        try:
            try:
                descriptor = os.open(temporary, _CREATE_NEW, 0o600)
            except FileExistsError:  # somebody else's file, never ours to remove
                continue
            with os.fdopen(descriptor, "wb") as stream:
                stream.write(data)
                stream.flush()
                os.fsync(stream.fileno())
            os.chmod(temporary, mode_bits)
            os.replace(temporary, path)
            return
        except BaseException:  # KeyboardInterrupt included: never leave the temporary behind
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise


_CREATE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)


def file_diff(path: str, before: bytes, after: bytes) -> str:
    """What ``--diff`` shows for one file: a patch, or for a notebook one diff per changed
    cell (a diff of its JSON would show escaped strings)."""
    if is_notebook(path):
        return notebook_diff(path, before, after)
    return unified_diff(path, before, after)


def unified_diff(path: str, before: bytes, after: bytes) -> str:
    """A unified diff that ``patch -p0`` applies; marks a missing final newline as diff does."""
    import difflib  # only --diff (and the HTML page) show diffs

    lines = difflib.unified_diff(
        decode(before).splitlines(keepends=True),
        decode(after).splitlines(keepends=True),
        fromfile=path,
        tofile=path,
    )
    out = []
    for line in lines:
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def copy_tree_entries(
    copies: list[tuple[str, str]], links: list[tuple[str, str]]
) -> tuple[int, list[tuple[str, str]]]:
    """``--output``: copy the non-Python files and recreate the symlinks that stay inside.

    Returns how many entries were copied and ``(path, message)`` for each failure.
    """
    failures = []
    copied = 0
    for source, destination in copies:
        try:
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            shutil.copy2(source, destination)
            copied += 1
        except OSError as error:
            failures.append((source, f"cannot copy to {destination}: {error}"))
    for link, destination in links:
        try:
            # Point at the same file, relative to the link, so the copy does not lead back here.
            target = os.path.relpath(os.path.realpath(link), os.path.dirname(link))
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            if os.path.lexists(destination):
                os.unlink(destination)
            os.symlink(target, destination)
            copied += 1
        except OSError as error:
            failures.append((link, f"cannot recreate symlink {destination}: {error}"))
    return copied, failures
