"""Linear methods that load compressed-tensors NVFP4 / FP8 / plain weights and requantize them at load.

After loading, each partition is dequantized with radiance-quant's functions
(``W = e2m1·scale/global`` for NVFP4, ``W = fp8·scale`` for FP8 per-channel), then either requantized to
MXFP4 (``mx.quantize_mxfp4``, the knob's exponent rule) and served by the MXFP4 kernel with the
identity rotation, or kept dense in the model dtype (``target="dequant"``).
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.linear import LinearMethodBase
from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
from vllm.model_executor.utils import set_weight_attrs

from radiance_vllm.mxfp4_method import mxfp4_apply, set_identity_rotation
from radiance_vllm.param_loading import add_param, checked, drop_params, init_layer, partition_loader

F8 = (torch.float8_e4m3fn,)
F32 = (torch.float32,)
FLOATS = (torch.bfloat16, torch.float16, torch.float32)
ROWS = {"input_dim": 1, "output_dim": 0}


class RequantLinearMethod(LinearMethodBase):
    def __init__(self, config, kind: str, target: str):
        self.config, self.kind, self.target = config, kind, target

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size, output_size,
                       params_dtype, **extra_weight_attrs):
        K, N, P = input_size_per_partition, sum(output_partition_sizes), len(output_partition_sizes)
        init_layer(layer, output_partition_sizes, self.config.packed_modules_mapping)
        layer.radiance_k = K
        loader = extra_weight_attrs["weight_loader"]
        if self.kind == "nvfp4":
            add_param(layer, "weight_packed", (N, K // 2), torch.uint8,
                      checked(layer, "weight_packed", loader, (torch.uint8,)),
                      {**ROWS, "packed_dim": 1, "packed_factor": 2})
            add_param(layer, "weight_scale", (N, K // 16), torch.float8_e4m3fn,
                      checked(layer, "weight_scale", loader, F8), ROWS)
            for name in ("weight_global_scale", "input_global_scale"):
                add_param(layer, name, (P, 1), torch.float32, partition_loader(layer, name, F32))
        elif self.kind == "fp8":
            add_param(layer, "weight", (N, K), torch.float8_e4m3fn, checked(layer, "weight", loader, F8), ROWS)
            add_param(layer, "weight_scale", (N, 1), torch.float32, checked(layer, "weight_scale", loader, F32),
                      {"output_dim": 0})
        else:
            add_param(layer, "weight", (N, K), params_dtype, checked(layer, "weight", loader, FLOATS), ROWS)

    def dequantized(self, layer) -> torch.Tensor:
        from radiance_quant.nvfp4 import fp8_channel_dequantize, nvfp4_dequantize

        if self.kind == "plain":
            return layer.weight.data.to(torch.float32)
        if self.kind == "fp8":
            return fp8_channel_dequantize(layer.weight.data, layer.weight_scale.data)
        parts, row = [], 0
        for p, n in enumerate(layer.radiance_sizes):
            parts.append(nvfp4_dequantize(layer.weight_packed.data[row:row + n], layer.weight_scale.data[row:row + n],
                                          layer.weight_global_scale.data[p]))
            row += n
        return torch.cat(parts)

    def process_weights_after_loading(self, layer) -> None:
        from radiance_kernels.formats import mx
        from radiance_vllm import kernel_calls

        w = self.dequantized(layer)
        drop_params(layer, "weight", "weight_packed", "weight_scale", "weight_global_scale", "input_global_scale")
        if self.target == "dequant":
            layer.dense_weight = w.to(layer.params_dtype)
            return
        packed, scales = mx.quantize_mxfp4(w, rule=self.config.rule)
        layer.mxfp4 = kernel_calls.prepare_mxfp4(packed, scales)
        set_identity_rotation(layer, layer.radiance_k, w.device)

    def apply(self, layer, x, bias=None):
        if self.target == "dequant":
            return torch.nn.functional.linear(x, layer.dense_weight, bias)
        return mxfp4_apply(layer, x, bias)


class FP8LMHeadMethod(UnquantizedEmbeddingMethod):
    """An FP8 per-channel lm_head, dequantized at load to bf16 (``W = bf16(fp8·scale)``), held in the model dtype."""

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size, output_size,
                       params_dtype, **extra_weight_attrs):
        super().create_weights(layer, input_size_per_partition, output_partition_sizes, input_size, output_size,
                               torch.float8_e4m3fn, **extra_weight_attrs)
        layer.radiance_dtype = params_dtype
        scale = torch.nn.Parameter(torch.empty(sum(output_partition_sizes), 1, dtype=torch.float32),
                                   requires_grad=False)
        layer.register_parameter("weight_scale", scale)
        set_weight_attrs(scale, {"output_dim": 0, **extra_weight_attrs})

    def process_weights_after_loading(self, layer) -> None:
        from radiance_quant.nvfp4 import fp8_channel_dequantize

        w = fp8_channel_dequantize(layer.weight.data, layer.weight_scale.data).to(torch.bfloat16)
        w = w.to(layer.radiance_dtype)
        drop_params(layer, "weight", "weight_scale")
        layer.weight = torch.nn.Parameter(w, requires_grad=False)
        super().process_weights_after_loading(layer)
