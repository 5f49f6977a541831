"""Ops: ``ops/<op>/{reference.py, triton.py}`` plus one ``torch.library.custom_op`` per op family.

Importing this package registers every op (and so fills the manifest).
"""

from radiance_kernels.ops.e4m3 import e4m3_decode, e4m3_encode
from radiance_kernels.ops.gdn import gdn_chunk, gdn_recurrent
from radiance_kernels.ops.mxfp4_gemm import mxfp4_gemm, mxfp4_gemm_out
from radiance_kernels.ops.rotate_quant import rotate_quant
from radiance_kernels.ops.skinny_gemm import skinny_gemm
from radiance_kernels.ops.stream import add_rms_norm, add_rms_norm_rotate_quant, gated, gated_rotate_quant
from radiance_kernels.ops.w4a8_gemm import w4a8_gemm, w4a8_gemm_out

__all__ = ["rotate_quant", "add_rms_norm", "add_rms_norm_rotate_quant", "gated", "gated_rotate_quant",
           "e4m3_encode", "e4m3_decode", "skinny_gemm", "gdn_chunk", "gdn_recurrent",
           "w4a8_gemm", "w4a8_gemm_out", "mxfp4_gemm", "mxfp4_gemm_out"]
