"""NPU1xx: optimizers and apex amp.

NpuFused optimizers (NPU101), ``combine_grad`` (NPU102), merged parameter groups (NPU103),
``combine_ddp`` (NPU104, opt-in), ``FP16_Optimizer`` to amp O2 (NPU106), optimizer names in
mmcv / mmengine configs (NPU107), timm and Hugging Face optimizer choices (NPU108). Shared, not
rules: ``_tables`` (the optimizer tables), ``_flow`` (where a file's optimizers come from and go),
``_amp`` (what an ``amp.initialize`` asks for), ``_plans`` (what the rules publish for each
other), ``_hazards`` (code that breaks a fused optimizer), ``_contract`` (parameters re-allocated
under a fused optimizer), ``_factories`` and ``_call_sites`` (optimizers built by a function of
another module), ``_fp16`` (NPU106's analysis of ``FP16_Optimizer`` wrappers), ``_configs``
(mmcv / mmengine config modules). NPU101 and NPU104 decide in pure planners, ``_fused_planner``
and ``_combine_ddp_planner`` (a ``FileView`` and plain values in, typed decisions out, no libcst);
the rule modules turn the decisions into fixes, reports and edits.
"""

# The document that explains this family (its rule table is generated: tools/rule_tables.py).
DOCS = "docs/rules-optimizers.md"
