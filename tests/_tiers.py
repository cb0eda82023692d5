"""What the README's test command runs, and what ``make test-all`` adds.

``NPU_MIGRATE_SLOW=1`` (``make test-all``) runs the tests marked ``slow`` (the root
``conftest.py`` deselects them otherwise) and lets the sampled tests take everything. Sampled
tests take a different sample on each run, chosen from xdist's ``testrun_uid`` (the same on
every worker of a run), so that runs over time cover what one run leaves out; each failure names
the sample, and setting it in the environment repeats it.
"""

from __future__ import annotations

import os

SLOW = os.environ.get("NPU_MIGRATE_SLOW") == "1"


def sample_index(variable: str, testrun_uid: str, count: int) -> int:
    """The sample (0 to ``count - 1``) of this run: ``variable``'s value when it is set, else one
    picked from the run's id."""
    chosen = os.environ.get(variable)
    if chosen is not None:
        index = int(chosen)
        if not 0 <= index < count:
            raise ValueError(f"{variable}={chosen}: must be between 0 and {count - 1}")
        return index
    return int(testrun_uid, 16) % count
