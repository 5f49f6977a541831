"""Ops: ``ops/<op>/{reference.py, triton.py}`` plus one ``torch.library.custom_op`` per op family.

Importing this package registers every op (and so fills the manifest).
"""

from radiance_kernels.ops.e4m3 import e4m3_decode, e4m3_encode

__all__ = ["e4m3_encode", "e4m3_decode"]
