"""NPU3xx and NPU92x: CUDA device code.

The rewrites of device code (NPU301-NPU308) and the device findings that only a person can
settle (NPU920-NPU926). Shared, not a rule: ``_common`` (device positions, the values that
reach them, integer indices, the ``--target`` mapping).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-device.md"
