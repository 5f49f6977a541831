"""Triton device helpers shared by the kernels (imported only by ``ops/*/triton.py``)."""
