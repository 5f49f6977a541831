"""MXFP4 linear methods: rotated (``paroquant_mxfp4``), stored plain (``radiance_mxfp4``) and plain
requantized at load (``requant_method``).

    y = e4m3_token(rotate(x)) · dequant_mxfp4(W)ᵀ      (bf16 GEMM output)

Both hold the kernel layout ``layer.mxfp4`` (``ops.mxfp4_gemm.prepare``) and call one GEMM over the
layer's rotation runs. The plain form carries the identity rotation (all angles 0, channel scales 1:
``rotate`` is then exact), so its activations go through the same ``rotate_quant`` op.
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.linear import LinearMethodBase

from radiance_vllm import checkall
from radiance_vllm.backend import kernel_backend
from radiance_vllm.knobs import settings
from radiance_vllm.param_loading import CheckpointError, add_param, checked, drop_params, init_layer
from radiance_vllm.rotation_params import create_rotation_params, finish_rotation

U8 = (torch.uint8,)


def set_identity_rotation(layer, k: int, device: torch.device) -> None:
    from radiance_kernels.formats.rotation import GROUP

    layer.rot_pairs = torch.arange(GROUP, dtype=torch.int16, device=device).repeat(k // GROUP)[None, None].contiguous()
    layer.rot_theta = torch.zeros(1, 1, k // 2, dtype=torch.float16, device=device)
    layer.rot_scales = torch.ones(1, k, dtype=torch.float16, device=device)
    layer.rot_bounds_list = [0, sum(layer.radiance_sizes)]


def mxfp4_apply(layer, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance_vllm import kernel_calls

    backend = kernel_backend()
    x2 = x.reshape(-1, x.shape[-1])
    A, AS, _ = kernel_calls.rotate_quant(x2, layer.rot_pairs, layer.rot_theta, layer.rot_scales, "e4m3", "token",
                                         backend)
    y = kernel_calls.mxfp4_gemm(A, AS, layer.mxfp4, layer.rot_bounds_list, backend)
    if settings().checkall:
        checkall.check_mxfp4(layer, x2, A, AS, y)
    y = y.to(x.dtype)
    if bias is not None:
        y = y + bias
    return y.reshape(*x.shape[:-1], y.shape[-1])


class MXFP4LinearMethod(LinearMethodBase):
    """Loads stored MXFP4 (``weight_packed`` / ``weight_scale``) with the checkpoint's rotation records
    (``rotated``) or with the identity rotation (a checkpoint without records)."""

    def __init__(self, config, rotated: bool = True):
        self.config, self.rotated = config, rotated

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size, output_size,
                       params_dtype, **extra_weight_attrs):
        K, N = input_size_per_partition, sum(output_partition_sizes)
        init_layer(layer, output_partition_sizes, self.config.packed_modules_mapping)
        if K % self.config.group_size:
            raise CheckpointError(f"{layer.prefix}: K={K} must be a multiple of {self.config.group_size}")
        loader = extra_weight_attrs["weight_loader"]
        add_param(layer, "weight_packed", (N, K // 2), torch.uint8, checked(layer, "weight_packed", loader, U8),
                  {"input_dim": 1, "output_dim": 0, "packed_dim": 1, "packed_factor": 2})
        add_param(layer, "weight_scale", (N, K // 32), torch.uint8, checked(layer, "weight_scale", loader, U8),
                  {"input_dim": 1, "output_dim": 0})
        layer.radiance_k = K
        if self.rotated:
            create_rotation_params(layer, K, len(output_partition_sizes), self.config.krot)

    def process_weights_after_loading(self, layer) -> None:
        from radiance_vllm import kernel_calls

        if self.rotated:
            finish_rotation(layer)
        else:
            set_identity_rotation(layer, layer.radiance_k, layer.weight_packed.device)
        layer.mxfp4 = kernel_calls.prepare_mxfp4(layer.weight_packed.data, layer.weight_scale.data)
        drop_params(layer, "weight_packed", "weight_scale")

    def apply(self, layer, x, bias=None):
        return mxfp4_apply(layer, x, bias)
