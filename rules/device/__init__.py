"""NPU3xx and NPU92x: CUDA device code.

The rewrites of device code (NPU301-NPU309) and the device findings that only a person can
settle (NPU920-NPU927). Shared, not rules: ``_common`` (device positions, the values that
reach them, integer indices), ``_target`` (the ``--target`` mapping), ``_tests`` (tests of
device strings and what reaches them).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-device.md"
