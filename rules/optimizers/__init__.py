"""NPU1xx: optimizers and apex amp.

NpuFused optimizers (NPU101), ``combine_grad`` (NPU102), merged parameter groups (NPU103) and
``combine_ddp`` (NPU104, opt-in). Shared, not rules: ``_common`` (the optimizer tables, the
optimizer flow of a file and NPU101's plan), ``_hazards`` (code that breaks a fused optimizer),
``_factories`` (optimizers built by a function of another module).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-optimizers.md"
