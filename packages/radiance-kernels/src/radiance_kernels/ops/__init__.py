"""Ops: ``ops/<op>/{reference.py, triton.py}`` plus one ``torch.library.custom_op`` per op family.

Importing this package registers every op (and so fills the manifest).
"""

from radiance_kernels.ops.e4m3 import e4m3_decode, e4m3_encode
from radiance_kernels.ops.skinny_gemm import skinny_gemm

__all__ = ["e4m3_encode", "e4m3_decode", "skinny_gemm"]
