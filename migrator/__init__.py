"""npu-migrate: rewrite PyTorch + NVIDIA apex training code for Huawei Ascend NPUs."""

__version__ = "0.1.0"
