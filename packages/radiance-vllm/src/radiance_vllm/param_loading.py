"""Parameters for quantized linears and loaders that name the checkpoint tensor on any mismatch.

vLLM's fused linears (QKV, gate_up, ...) load one checkpoint tensor per shard through
``weight_loader(param, tensor, shard_id)``. Weight-like tensors (codes, zeros, scales) carry
``input_dim``/``output_dim``/``packed_dim`` so vLLM's own v1 loader places each shard; rotation tensors
are per projection, so they get a leading partition axis and :func:`partition_loader` puts each shard's
copy in its slot. Every loader here checks dtype and shape first and raises :class:`CheckpointError`
with the checkpoint tensor's name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

SHARD_INDEX = {"q": 0, "k": 1, "v": 2}


class CheckpointError(ValueError):
    """A checkpoint tensor does not match what the quantization method expects (named in the message)."""


def checkpoint_modules(prefix: str, n_partitions: int, packed: dict[str, list[str]]) -> list[str]:
    """The checkpoint module name of each partition of the vLLM layer ``prefix``."""
    head, _, leaf = prefix.rpartition(".")
    parts = packed.get(leaf)
    if parts and len(parts) == n_partitions:
        return [f"{head}.{p}" if head else p for p in parts]
    return [prefix] * n_partitions


def init_layer(layer: torch.nn.Module, output_partition_sizes: list[int], packed: dict[str, list[str]]) -> None:
    """Record the partition widths and checkpoint module names the loaders and messages use."""
    layer.radiance_sizes = list(output_partition_sizes)
    layer.radiance_modules = checkpoint_modules(layer.prefix, len(output_partition_sizes), packed)


def shard_indices(shard_id, n_partitions: int) -> list[int]:
    if shard_id is None:
        return list(range(n_partitions))
    if isinstance(shard_id, str):
        return [SHARD_INDEX[shard_id]]
    if isinstance(shard_id, tuple):
        return list(shard_id)
    return [int(shard_id)]


def tensor_name(layer: torch.nn.Module, name: str, shard_id=None) -> str:
    modules = layer.radiance_modules
    idx = shard_indices(shard_id, len(modules))
    return ",".join(sorted({f"{modules[i]}.{name}" for i in idx}))


def _check_dtype(layer, name, shard_id, tensor: torch.Tensor, dtypes: tuple[torch.dtype, ...]) -> None:
    if tensor.dtype not in dtypes:
        raise CheckpointError(f"{tensor_name(layer, name, shard_id)}: dtype {tensor.dtype}, expected "
                              + " or ".join(str(d) for d in dtypes))


def checked(layer: torch.nn.Module, name: str, loader: Callable, dtypes: tuple[torch.dtype, ...]) -> Callable:
    """Wrap vLLM's loader: dtype check first, and a shape mismatch re-raised naming the tensor."""

    def load(param, loaded_weight, *shard):
        shard_id = shard[0] if shard else None
        _check_dtype(layer, name, shard_id, loaded_weight, dtypes)
        try:
            loader(param, loaded_weight, *shard)
        except (AssertionError, RuntimeError, IndexError) as exc:
            raise CheckpointError(
                f"{tensor_name(layer, name, shard_id)}: checkpoint shape {tuple(loaded_weight.shape)} does not fit "
                f"parameter {layer.prefix}.{name} {tuple(param.shape)} (partitions {layer.radiance_sizes})"
            ) from exc

    return load


def partition_loader(layer: torch.nn.Module, name: str, dtypes: tuple[torch.dtype, ...]) -> Callable:
    """Loader for a per-projection tensor stored as ``param[P, *shape]``; the input dim is the last one.

    A row-parallel layer under tensor parallelism takes its slice of the last (input-channel) dim.
    A checkpoint ``[1, K]`` tensor (channel_scales) loads into a ``[P, K]`` parameter.
    """

    def load(param, loaded_weight, shard_id=None):
        _check_dtype(layer, name, shard_id, loaded_weight, dtypes)
        w = loaded_weight
        if param.dim() == 2 and w.dim() == 2 and w.shape[0] == 1:
            w = w[0]
        k = param.shape[-1]
        if getattr(layer, "input_is_parallel", False) and layer.tp_size > 1 and w.shape[-1] == k * layer.tp_size:
            w = w.narrow(-1, layer.tp_rank * k, k)
        if tuple(w.shape) != tuple(param.shape[1:]):
            raise CheckpointError(f"{tensor_name(layer, name, shard_id)}: checkpoint shape "
                                  f"{tuple(loaded_weight.shape)}, expected {tuple(param.shape[1:])}")
        for i in shard_indices(shard_id, param.shape[0]):
            param.data[i].copy_(w)

    return load


def add_param(layer: torch.nn.Module, name: str, shape: tuple[int, ...], dtype: torch.dtype, loader: Callable,
              attrs: dict | None = None) -> torch.nn.Parameter:
    from vllm.model_executor.utils import set_weight_attrs

    param = torch.nn.Parameter(torch.empty(shape, dtype=dtype), requires_grad=False)
    layer.register_parameter(name, param)
    set_weight_attrs(param, {**(attrs or {}), "weight_loader": loader})
    return param


def drop_params(layer: torch.nn.Module, *names: str) -> None:
    """Remove loaded checkpoint parameters once they are repacked."""
    for name in names:
        if name in layer._parameters:
            del layer._parameters[name]
