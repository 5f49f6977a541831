"""Run z-lab paroquant's own `convert` (real mode) on CPU and capture what it computed.

Runs in a throwaway venv holding paroquant (+ autoawq for its reference forward); see test_external.py.
argv: BASE_DIR WORK_DIR. Writes WORK_DIR/zlab (their checkpoint) and WORK_DIR/zlab_capture.pt.

CPU stand-ins, written from the format spec (PLATFORM-FACTS): `torch.ops.rotation.rotate` (their CUDA
extension) and the `paroquant.kernels.cuda` module that JIT-builds it. fp16 inputs are rounded to half
after the channel scale and after every layer, as their fp16 path does.
"""

import sys
import types
from pathlib import Path

import torch


@torch.library.custom_op("rotation::rotate", mutates_args=())
def rotate(
    x: torch.Tensor,
    idx_ij: torch.Tensor,
    theta: torch.Tensor,
    scales: torch.Tensor | None = None,
    group_size: int = 128,
) -> torch.Tensor:
    dt, K = x.dtype, x.shape[-1]
    y = x.reshape(-1, K)
    if scales is not None:
        y = (y.float() * scales.float().reshape(1, K)).to(dt)
    G = K // group_size
    off = (torch.arange(G) * group_size)[:, None]
    for r in range(idx_ij.shape[0]):
        idx = idx_ij[r].long().reshape(G, group_size)
        i, j = (idx[:, 0::2] + off).reshape(-1), (idx[:, 1::2] + off).reshape(-1)
        c, s = theta[r].float().cos(), theta[r].float().sin()
        a, b = y[:, i].float(), y[:, j].float()
        y = y.clone()
        y[:, i], y[:, j] = (c * a + s * b).to(dt), (c * b - s * a).to(dt)
    return y.reshape(x.shape)


stub = types.ModuleType("paroquant.kernels.cuda")
stub.scaled_pairwise_rotation = lambda x, idx, th, sc=None, gs=128: torch.ops.rotation.rotate(x, idx, th, sc, gs)
sys.modules["paroquant.kernels.cuda"] = stub

import awq.modules.linear.gemm as awq_gemm  # noqa: E402
from awq.utils.packing_utils import dequantize_gemm  # noqa: E402
from paroquant.cli import convert  # noqa: E402
from paroquant.inference.backends.transformers.modules import RotateQuantizedLinear  # noqa: E402
from paroquant.optim.util import get_named_linears  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

awq_gemm.TRITON_AVAILABLE = False  # their naive CPU path: dequantize_gemm + matmul


def optimize_results(base: Path, res: Path) -> list[str]:
    """What `paroquant optimize` would leave: per-linear .pt state dicts (random rotations, RTN scales)."""
    res.mkdir(parents=True, exist_ok=True)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float16)
    gen = torch.Generator().manual_seed(0)
    order = []
    for li, layer in enumerate(model.model.layers):
        for name, lin in get_named_linears(layer).items():
            w = lin.weight.data
            N, K = w.shape
            pairs = torch.stack(
                [torch.cat([torch.randperm(128, generator=gen) for _ in range(K // 128)]) for _ in range(8)]
            )
            theta = ((torch.rand(8, K // 2, generator=gen) * 2 - 1) * 3.14).half().float()  # fp16-exact angles
            cs = torch.exp2(torch.randint(-1, 2, (1, K), generator=gen).float())  # exact inverse in fp16
            rot = torch.ops.rotation.rotate(w.float() * cs, pairs.to(torch.int16), theta, None, 128).reshape(-1, 128)
            lo, hi = rot.amin(1, keepdim=True), rot.amax(1, keepdim=True)
            s = ((hi - lo) / 15).clamp(min=1e-5).half().float()
            sd = {
                "weight": w,
                "channel_scales": cs,
                "quantizer.scale": s,
                "quantizer.zero_point_float": lo / s,
                "n_bits": 4,
                "group_size": 128,
            }
            sd |= {f"pairs_grouped.{r}": pairs[r].to(torch.int16) for r in range(8)}
            sd |= {f"angles_grouped.{r}": theta[r] for r in range(8)}
            torch.save(sd, res / f"{li}.{name}.pt")
            order.append(f"model.layers.{li}.{name}")
    return order


def main() -> None:
    base, work = Path(sys.argv[1]), Path(sys.argv[2])
    order = optimize_results(base, work / "results")
    captured = []
    real_rot, real_layer = convert._quantize_rotated_weight, convert._quantize_layer

    def capture(**kw):
        out = real_rot(**kw)
        captured.append(out)
        return out

    convert._quantize_rotated_weight = capture
    convert._quantize_layer = lambda sd, device: real_layer(sd, device="cpu")
    torch.cuda.is_available = lambda: True  # their CLI refuses to start without CUDA; everything here runs on CPU
    sys.argv = [
        "convert",
        "--model",
        str(base),
        "--result-dir",
        str(work / "results"),
        "--output-path",
        str(work / "zlab"),
    ]
    convert.main()

    tensors = {}
    for f in (work / "zlab").glob("*.safetensors"):
        with safe_open(f, "pt") as fh:
            tensors |= {k: fh.get_tensor(k) for k in fh.keys()}  # noqa: SIM118 (safe_open is not a dict)
    out, gen = {}, torch.Generator().manual_seed(1)
    for prefix, (codes, scales, zeros) in zip(order, captured, strict=True):
        N, K = codes.shape
        lin = RotateQuantizedLinear(K, N, group_size=128, bits=4, krot=8)
        lin.load_state_dict(
            {k: tensors[f"{prefix}.{k}"] for k in ("theta", "pairs", "channel_scales", "qweight", "qzeros", "scales")}
        )
        x = torch.randn(3, K, generator=gen).half()
        out[prefix] = {
            "codes": codes,
            "scales": scales,
            "zeros": zeros,
            "x": x,
            "y": lin(x).reshape(3, N),
            "w_deq": dequantize_gemm(lin.qweight, lin.qzeros, lin.scales, 4, 128),
        }
    torch.save(out, work / "zlab_capture.pt")
    print(f"zlab: {len(out)} linears converted and captured")


if __name__ == "__main__":
    main()
