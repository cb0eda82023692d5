"""NPU90x: apex's CUDA extensions (``amp_C``, ``multi_tensor_applier``, ``apex.contrib``), which
have no NPU build."""
