"""NPU90x: apex's CUDA extensions (``amp_C``, ``multi_tensor_applier``, ``apex.contrib``), which
have no NPU build."""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-apex-extensions.md"
