"""The KV connector a capture server runs: vLLM's ``ExampleHiddenStatesConnector`` with a host-memory write.

vLLM 0.32's ``extract_hidden_states`` speculative method stores, for every token the target computes, the
residual stream at the requested aux layers in a cache-only KV layer; the connector copies a finished
request's slots out into ``{shared_storage_path}/{request_id}.safetensors`` (``hidden_states``
[T, layers, H] in the served dtype, ``token_ids`` [T]) and holds an exclusive ``flock`` on ``….lock`` until
the file is complete. Its copy goes through pinned memory and a CUDA stream, which fails on a CPU engine
(``RuntimeError: Found no NVIDIA driver on your system. ...`` at ``torch.empty_like(..., pin_memory=True)``).
This class is vLLM's connector unchanged for a CUDA cache; for a host cache it reads the same slots with
vLLM's ``extract_from_kv_cache`` and writes the same file synchronously, under the same lock. vLLM loads it
with ``kv_transfer_config = {"kv_connector": "HostHiddenStatesConnector",
"kv_connector_module_path": "radiance_drafter.vllm_connector", ...}``.
"""

from __future__ import annotations

import fcntl
import os

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
    extract_from_kv_cache,
)


class _Written:
    """Stands in for the stock path's "device-to-host copy done" CUDA event: the write already happened."""

    @staticmethod
    def query() -> bool:
        return True

    @staticmethod
    def synchronize() -> None:
        return None


class HostHiddenStatesConnector(ExampleHiddenStatesConnector):
    def _submit_async_write(self, pending: PendingSave) -> None:
        if not self._is_tp_rank_zero or self._kv_cache is None or self._kv_cache.is_cuda:
            return super()._submit_async_write(pending)
        blocks = torch.tensor(pending.block_ids, dtype=torch.long)
        slots = (blocks[:, None] * self._block_size + torch.arange(self._block_size)).flatten()
        hidden = extract_from_kv_cache(self._kv_cache, slots, pending.token_ids.shape[0]).clone()
        os.makedirs(os.path.dirname(pending.filename), exist_ok=True)
        lock_fd = self._lock_fds.pop(pending.req_id, None)
        if lock_fd is None and self.use_lock:
            lock_fd = os.open(pending.filename + ".lock", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
            fcntl.flock(lock_fd, fcntl.LOCK_EX)
        self._write_tensors({"hidden_states": hidden, "token_ids": pending.token_ids.clone()}, _Written(),
                            pending.filename, lock_fd)
        self._req_copy_events[pending.req_id] = _Written()
