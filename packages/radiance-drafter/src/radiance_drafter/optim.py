"""AdamW over fp32 master weights, its state optionally kept on the CPU.

The model's parameters may be bf16 on the accelerator; each step copies their gradients into fp32 master
copies (on ``state_device``), runs ``torch.optim.AdamW`` there, and writes the masters back in the model's
dtype. With ``state_device="cpu"`` the optimizer's memory (master + two moments = 12 bytes/param) leaves
the accelerator.
"""

from __future__ import annotations

import torch


class MasterAdamW:
    def __init__(self, params, lr: float, betas=(0.9, 0.95), weight_decay: float = 0.0,
                 state_device: str | torch.device | None = None):
        self.params = [p for p in params if p.requires_grad]
        self.masters = [p.detach().to(state_device or p.device, torch.float32).clone() for p in self.params]
        self.opt = torch.optim.AdamW(self.masters, lr=lr, betas=betas, weight_decay=weight_decay)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float) -> None:
        for group in self.opt.param_groups:
            group["lr"] = lr
        for p, m in zip(self.params, self.masters, strict=True):
            m.grad = None if p.grad is None else p.grad.to(m.device, torch.float32)
        self.opt.step()
        for p, m in zip(self.params, self.masters, strict=True):
            p.copy_(m.to(p.device, p.dtype))

    def state_dict(self) -> dict:
        return {"masters": [m.clone() for m in self.masters], "opt": self.opt.state_dict()}

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        if len(state["masters"]) != len(self.masters):
            raise ValueError(f"optimizer state has {len(state['masters'])} tensors, model has {len(self.masters)}")
        for p, m, s in zip(self.params, self.masters, state["masters"], strict=True):
            m.copy_(s)
            p.copy_(m.to(p.device, p.dtype))
        self.opt.load_state_dict(state["opt"])
