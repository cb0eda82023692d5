from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-fixtures",
        action="store_true",
        default=False,
        help="rewrite fixtures/*/*.after.py and *.diagnostics.txt from the rules' current output "
        "(review the diff before committing)",
    )
