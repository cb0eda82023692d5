"""Suppression comments.

- ``# npu-migrate: ignore`` on a line: no rule edits or reports at that line.
- ``# npu-migrate: ignore[NPU101,NPU2]``: only the listed codes, or code prefixes, are suppressed.
- ``# npu-migrate: skip-file`` in a file's leading comments (before the first statement, docstring
  included): the file is not processed.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

MARKER = "npu-migrate:"
_IGNORE = re.compile(r"#\s*npu-migrate:\s*ignore(?:\[(?P<codes>[^\]]*)\])?")
_SKIP_FILE = re.compile(r"#\s*npu-migrate:\s*skip-file\b")
_LEADING_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.ENCODING}


@dataclass(frozen=True)
class Suppressions:
    """Which lines suppress which codes. ``None`` as the code set means every code."""

    by_line: dict[int, frozenset[str] | None] = field(default_factory=dict)
    skip_file: bool = False

    def covers(self, line: int, code: str) -> bool:
        if line not in self.by_line:
            return False
        codes = self.by_line[line]
        return codes is None or any(code.startswith(prefix) for prefix in codes)

    @classmethod
    def scan(cls, text: str) -> Suppressions:
        """Read the suppression comments of ``text`` (cheap when there are none)."""
        if MARKER not in text:
            return cls()
        by_line: dict[int, frozenset[str] | None] = {}
        skip_file = False
        leading = True
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.type not in _LEADING_TOKENS:
                    leading = False
                if token.type != tokenize.COMMENT:
                    continue
                if leading and _SKIP_FILE.match(token.string):
                    skip_file = True
                match = _IGNORE.search(token.string)
                if match is not None:
                    by_line[token.start[0]] = _parse_codes(match.group("codes"))
        except (tokenize.TokenError, SyntaxError):
            # The parser reports the real problem; suppressions of an unparsable file do not matter.
            pass
        return cls(by_line, skip_file)

    @classmethod
    def scan_comments(cls, text: str) -> Suppressions:
        """The same comments in a file that is not Python (a shell script): ``#`` comments
        found line by line; ``skip-file`` counts in the leading comment lines (a ``#!`` line
        included)."""
        if MARKER not in text:
            return cls()
        by_line: dict[int, frozenset[str] | None] = {}
        skip_file = False
        leading = True
        for number, line in enumerate(text.splitlines(), start=1):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                leading = False
            if leading and _SKIP_FILE.match(stripped):
                skip_file = True
            match = _IGNORE.search(line)
            if match is not None:
                by_line[number] = _parse_codes(match.group("codes"))
        return cls(by_line, skip_file)


def _parse_codes(raw: str | None) -> frozenset[str] | None:
    if raw is None:
        return None
    codes = frozenset(part.strip().upper() for part in raw.split(",") if part.strip())
    return codes or None
