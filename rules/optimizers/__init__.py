"""NPU1xx: optimizers and apex amp.

NpuFused optimizers (NPU101), ``combine_grad`` (NPU102), merged parameter groups (NPU103),
``combine_ddp`` (NPU104, opt-in), ``FP16_Optimizer`` to amp O2 (NPU106), optimizer names in
mmcv / mmengine configs (NPU107), timm and Hugging Face optimizer choices (NPU108). Shared, not
rules: ``_common`` (the optimizer tables, the optimizer flow of a file and NPU101's plan),
``_hazards`` (code that breaks a fused optimizer),
``_factories`` (optimizers built by a function of another module), ``_fp16`` (NPU106's analysis
of ``FP16_Optimizer`` wrappers), ``_configs`` (mmcv / mmengine config modules).
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-optimizers.md"
