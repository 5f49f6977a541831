"""Per-projection rotation records on a (possibly merged) linear, and their dedup into runs.

A merged linear with P partitions holds ``pairs [P, krot, K]``, ``theta [P, krot, K/2]`` and
``channel_scales [P, K]``. After loading, each partition's records are validated (naming the checkpoint
tensor), and adjacent partitions with identical records are merged into one run: qwen3.5's
in_proj_qkvz (q, k, v share one rotation, z has its own) loads as P = 4 and runs as R = 2. The kernels
take R distinct rotations and ``bounds [R + 1]``, the output-column edges of the runs.
"""

from __future__ import annotations

import torch

from radiance_vllm.param_loading import CheckpointError, add_param, drop_params, partition_loader

#: The most distinct rotations one GEMM launch takes (radiance-kernels' partition limit).
MAX_RUNS = 3
FLOATS = (torch.float16, torch.bfloat16, torch.float32)


ROTATION_TENSORS = ("pairs", "theta", "channel_scales")


def validate_checkpoint_rotations(model_dir, modules) -> None:
    """Check every module's rotation records in the checkpoint before any engine starts (they are small)."""
    from radiance_kernels.formats.rotation import validate_rotation
    from radiance_vllm.checkpoint_scan import load_tensors

    tensors = load_tensors(model_dir, {f"{m}.{k}" for m in modules for k in ROTATION_TENSORS})
    for m in sorted(modules):
        missing = [f"{m}.{k}" for k in ROTATION_TENSORS if f"{m}.{k}" not in tensors]
        if missing:
            raise CheckpointError(f"{model_dir}: missing rotation tensor(s) {missing}")
        try:
            validate_rotation(*(tensors[f"{m}.{k}"] for k in ROTATION_TENSORS),
                              name=f"{m}.{{pairs,theta,channel_scales}}")
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None


def create_rotation_params(layer: torch.nn.Module, k: int, n_partitions: int, krot: int) -> None:
    P = n_partitions
    add_param(layer, "pairs", (P, krot, k), torch.int16, partition_loader(layer, "pairs", (torch.int16,)))
    add_param(layer, "theta", (P, krot, k // 2), torch.float16, partition_loader(layer, "theta", FLOATS))
    add_param(layer, "channel_scales", (P, k), torch.float16, partition_loader(layer, "channel_scales", FLOATS))


def finish_rotation(layer: torch.nn.Module) -> None:
    """Validate, dedup into runs, and store ``rot_pairs/rot_theta/rot_scales/rot_bounds_list`` on the layer."""
    from radiance_kernels.formats.rotation import validate_rotation

    pairs, theta, scales = layer.pairs.data, layer.theta.data, layer.channel_scales.data
    for i, module in enumerate(layer.radiance_modules):
        try:
            validate_rotation(pairs[i], theta[i], scales[i][None], name=f"{module}.{{pairs,theta,channel_scales}}")
        except ValueError as exc:
            raise CheckpointError(str(exc)) from None
    runs = runs_of(pairs, theta, scales)
    if len(runs) > MAX_RUNS:
        raise CheckpointError(f"{layer.prefix}: {len(runs)} distinct rotations over partitions "
                              f"{layer.radiance_modules}; one GEMM takes at most {MAX_RUNS}")
    edges = [0]
    for start, stop in runs:
        edges.append(edges[-1] + sum(layer.radiance_sizes[start:stop]))
    first = [start for start, _ in runs]
    layer.rot_pairs = pairs[first].contiguous()
    layer.rot_theta = theta[first].contiguous()
    layer.rot_scales = scales[first].contiguous()
    layer.rot_bounds_list = edges
    drop_params(layer, "pairs", "theta", "channel_scales")


def runs_of(pairs: torch.Tensor, theta: torch.Tensor, scales: torch.Tensor) -> list[tuple[int, int]]:
    """[(start, stop)] partition ranges whose records are identical to their left neighbour's."""
    runs = [(0, 1)]
    for i in range(1, pairs.shape[0]):
        same = (torch.equal(pairs[i], pairs[i - 1]) and torch.equal(theta[i], theta[i - 1])
                and torch.equal(scales[i], scales[i - 1]))
        runs[-1:] = [(runs[-1][0], i + 1)] if same else [runs[-1], (i, i + 1)]
    return runs
