"""A corrupted checkpoint fails at load through a real server: the log names the tensor, never healthy."""

import httpx
import pytest
from conftest import SINGLE_PROCESS

from radiance_vllm.served_formats import BAD_PAIRS_MESSAGE, FORMATS, corrupt_pairs
from radiance_vllm.server import VLLMServer


def test_pairs_not_a_permutation_fails_at_load_naming_the_tensor(tiny_float, tmp_path):
    good, _ = FORMATS["int4"].build(tiny_float, tmp_path / "int4")
    bad = corrupt_pairs(good, tmp_path / "bad")
    server = VLLMServer(model=bad, workdir=tmp_path / "srv", args=SINGLE_PROCESS["args"], env=SINGLE_PROCESS["env"])
    with pytest.raises(RuntimeError, match="exited"):
        server.start(timeout=900)
    assert server.proc.poll() is not None
    assert BAD_PAIRS_MESSAGE in server.log_path.read_text()
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{server.url}/health", timeout=2)
