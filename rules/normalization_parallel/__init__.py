"""NPU2xx: normalization layers, apex.parallel, and the order of the optimizer and the DDP wrap.

``FusedLayerNorm``/``FusedRMSNorm`` to torch (NPU201), apex.parallel to torch (NPU202), the
optimizer built before DDP wraps the model (NPU203). Shared, not a rule: ``_common`` (import
re-homing and source-text helpers).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-normalization-parallel.md"
