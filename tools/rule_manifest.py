"""Write the rules' manifest, migrator/data/rules_manifest.json, from the rule classes.

    python tools/rule_manifest.py          # rewrite the manifest
    python tools/rule_manifest.py --check  # exit 1 when it is stale

The manifest is what a run knows about each rule before importing it (code, name, family,
opt-in, trigger strings, project and native triggers, plans; see ``migrator.registry.RuleEntry``),
and the size of every source file of ``rules/`` it was made from. A run whose ``rules/`` differs
from those sizes ignores it and imports every rule instead; tests/test_rule_manifest.py runs
``--check``, so a rule added or edited without running this tool fails the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from migrator.registry import MANIFEST, manifest_document


def rendered() -> str:
    return json.dumps(manifest_document(), indent=2, ensure_ascii=False) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report a stale manifest")
    parser.add_argument(
        "--manifest", type=Path, default=MANIFEST, help="the manifest [the package's]"
    )
    args = parser.parse_args(argv)
    text = rendered()
    manifest: Path = args.manifest
    current = manifest.read_text(encoding="utf-8") if manifest.is_file() else None
    if text == current:
        return 0
    if args.check:
        print(f"{manifest.name} is stale: run python tools/rule_manifest.py")
        return 1
    manifest.write_text(text, encoding="utf-8")
    print(f"{manifest.name} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
