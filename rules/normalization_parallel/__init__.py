"""NPU2xx: normalization layers, apex.parallel, and the order of the optimizer and the DDP wrap.

``FusedLayerNorm``/``FusedRMSNorm`` to torch (NPU201), apex.parallel to torch (NPU202), the
optimizer built before DDP wraps the model (NPU203). Shared, not rules: ``_common`` (import
re-homing and source-text helpers), and the analyses of the two largest rules, each a pure
"analyse -> plan" half that the rule turns into fixes, reports and edits: ``_layer_norm``
(NPU201's plan: what becomes torch's LayerNorm / RMSNorm, what is reported) and ``_ddp_order``
(NPU203's plan: which statements move above which wrap, which optimizers are reported), with
``_ddp_proof`` (the proof that a move is safe).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-normalization-parallel.md"
