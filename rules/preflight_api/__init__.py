"""NPU93x: the pre-flight report of what will still fail on an NPU.

torch APIs the selected torch_npu release does not support (NPU930) or supports with a
difference (NPU931), and calls of the repository's own CUDA operators (NPU932). Shared, not a
rule: ``_common`` (the lookup of API-table entries).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-preflight-api.md"
