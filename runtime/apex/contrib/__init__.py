"""Ascend apex's ``apex.contrib`` helpers that the fused optimizers and amp build on."""
