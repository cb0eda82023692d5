"""``python -m apex.testing.npu_shim`` prints the directory to put on PYTHONPATH."""

from apex.testing.npu_shim import npu_shim_path

print(npu_shim_path())
