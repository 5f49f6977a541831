"""ParoQuant linear method (int4 / int5): rotate + quantize the activations, then one W4A8 group GEMM.

    y = rotate_quant(x) · dequant(Q)ᵀ,   dequant(Q)[n, k] = (q[k, n] − z[k/128, n]) · s[k/128, n]

Checkpoint tensors per projection: ``qweight [K, N/8]``, ``qzeros [K/128, N/8]`` int32 (AWQ order),
``scales [K/128, N]`` fp16, int5 also ``qweight_hi [K, N/32]``, ``qzeros_hi [K/128, N/32]`` int32, and
the rotation records (see :mod:`radiance_vllm.rotation_params`). At load the codes are validated,
repacked into the kernel layout and the checkpoint parameters dropped.
"""

from __future__ import annotations

import torch
from vllm.model_executor.layers.linear import LinearMethodBase

from radiance_vllm import checkall, stream
from radiance_vllm.backend import kernel_backend
from radiance_vllm.knobs import settings
from radiance_vllm.param_loading import CheckpointError, add_param, checked, drop_params, init_layer
from radiance_vllm.rotation_params import FLOATS, create_rotation_params, finish_rotation

INT = (torch.int32,)


class ParoQuantLinearMethod(LinearMethodBase):
    def __init__(self, config):
        self.config = config

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size, output_size,
                       params_dtype, **extra_weight_attrs):
        K, N, g = input_size_per_partition, sum(output_partition_sizes), self.config.group_size
        init_layer(layer, output_partition_sizes, self.config.packed_modules_mapping)
        width = 32 if self.config.bits == 5 else 8
        if K % g or any(n % width for n in output_partition_sizes):
            raise CheckpointError(f"{layer.prefix}: K={K} must be a multiple of {g} and every partition width "
                                  f"{output_partition_sizes} a multiple of {width} "
                                  f"for {self.config.bits}-bit paroquant")
        loader = extra_weight_attrs["weight_loader"]
        packed = {"input_dim": 0, "output_dim": 1, "packed_dim": 1}
        add_param(layer, "qweight", (K, N // 8), torch.int32, checked(layer, "qweight", loader, INT),
                  {**packed, "packed_factor": 8})
        add_param(layer, "qzeros", (K // g, N // 8), torch.int32, checked(layer, "qzeros", loader, INT),
                  {**packed, "packed_factor": 8})
        add_param(layer, "scales", (K // g, N), torch.float16, checked(layer, "scales", loader, FLOATS),
                  {"input_dim": 0, "output_dim": 1})
        if self.config.bits == 5:
            add_param(layer, "qweight_hi", (K, N // 32), torch.int32, checked(layer, "qweight_hi", loader, INT),
                      {**packed, "packed_factor": 32})
            add_param(layer, "qzeros_hi", (K // g, N // 32), torch.int32, checked(layer, "qzeros_hi", loader, INT),
                      {**packed, "packed_factor": 32})
        create_rotation_params(layer, K, len(output_partition_sizes), self.config.krot)

    def process_weights_after_loading(self, layer) -> None:
        from radiance_vllm import kernel_calls

        bad = ~torch.isfinite(layer.scales.data.float())
        if bad.any():
            col = int(bad.nonzero()[0, 1])
            raise CheckpointError(f"{_module_of(layer, col)}.scales: {int(bad.sum())} non-finite group scales")
        finish_rotation(layer)
        hi = (layer.qweight_hi.data, layer.qzeros_hi.data) if self.config.bits == 5 else (None, None)
        layer.w4a8 = kernel_calls.prepare_w4a8(layer.qweight.data, layer.qzeros.data,
                                               layer.scales.data.to(torch.float16), *hi)
        drop_params(layer, "qweight", "qzeros", "scales", "qweight_hi", "qzeros_hi")

    def apply(self, layer, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        from radiance_vllm import kernel_calls

        s, backend = settings(), kernel_backend()
        x2 = x.reshape(-1, x.shape[-1])
        handed = stream.take(layer, x2) if s.stream else None
        A, AS, RS = handed or kernel_calls.rotate_quant(x2, layer.rot_pairs, layer.rot_theta, layer.rot_scales,
                                                        kernel_calls.act_element(x2.shape[0]), s.pq_scales, backend)
        producer = getattr(layer, "radiance_defer_to", None)
        if producer is not None and bias is None and x.dtype == torch.bfloat16 and \
                x2.shape[0] <= kernel_calls.PARTIALS_MAX_M:  # the producer reading y sums the split partials
            parts = kernel_calls.w4a8_gemm_partials(A, AS, RS, layer.w4a8, layer.rot_bounds_list, s.pq_zpe, backend)
            if s.checkall:
                checkall.check_w4a8(layer, x2, A, AS, RS, kernel_calls.split_sum(parts))
            y = x2.new_empty(x2.shape[0], parts.shape[-1])  # unfilled: its only reader takes the partials
            stream.defer(producer, y, parts)
            return y.reshape(*x.shape[:-1], y.shape[-1])
        y = kernel_calls.w4a8_gemm(A, AS, RS, layer.w4a8, layer.rot_bounds_list, s.pq_zpe, backend)
        if handed is not None:
            stream.hand_after(layer, x2, y)
        if s.checkall:
            checkall.check_w4a8(layer, x2, A, AS, RS, y)
        y = y.to(x.dtype)
        if bias is not None:
            y = y + bias
        return y.reshape(*x.shape[:-1], y.shape[-1])


def _module_of(layer, column: int) -> str:
    edge = 0
    for module, size in zip(layer.radiance_modules, layer.radiance_sizes, strict=True):
        edge += size
        if column < edge:
            return module
    return layer.radiance_modules[-1]
