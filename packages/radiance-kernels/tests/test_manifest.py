import pytest
import torch

import radiance_kernels
from radiance_kernels.backends import BackendUnavailableError, check_backend
from radiance_kernels.ops import registry


def test_manifest_lists_registered_ops():
    m = radiance_kernels.manifest()
    assert m["e4m3_encode"] == 1 and m["e4m3_decode"] == 1


def test_require_names_missing_op_and_versions(monkeypatch):
    ops = registry.registered_ops()
    spec = ops["e4m3_encode"]
    monkeypatch.setattr(registry, "_OPS", {**{k: v for k, v in ops.items() if k != "e4m3_encode"},
                                          "e4m3_encode_v2": spec})
    with pytest.raises(ImportError, match=r"op 'e4m3_encode': required version 1, found none"):
        radiance_kernels.require("consumer-x", {"e4m3_encode": 1})


def test_require_names_version_mismatch():
    with pytest.raises(ImportError, match=r"op 'e4m3_decode': required version 7, found version 1"):
        radiance_kernels.require("consumer-x", {"e4m3_decode": 7})


def test_unknown_and_unavailable_backends(monkeypatch):
    with pytest.raises(BackendUnavailableError, match="unknown backend 'cuda'"):
        check_backend("cuda", torch.device("cpu"), "e4m3_encode")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if not torch.cuda.is_available():
        with pytest.raises(BackendUnavailableError, match="backend 'triton' unavailable"):
            torch.ops.radiance.e4m3_encode(torch.zeros(4), "triton")

