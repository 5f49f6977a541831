import os
import subprocess
import sys

import pytest

from radiance_vllm.paroquant_config import ParoQuantConfig
from radiance_vllm.plugin import register


def test_register_is_idempotent_and_registers_the_configs():
    register()
    register()
    from vllm.model_executor.layers.quantization import get_quantization_config

    assert get_quantization_config("paroquant") is ParoQuantConfig


PDL_OFF = """
from radiance_kernels import backends
from vllm.plugins import load_general_plugins
assert backends.set_programmatic_launch(True)  # on by default
load_general_plugins()
print("PDL", backends.set_programmatic_launch(True))
"""


@pytest.mark.parametrize("value,want", [("0", "False"), ("", "True")])
def test_pdl_knob_sets_the_kernels_switch(value, want):
    """``RADIANCE_PDL=0`` turns programmatic dependent launch off in every process the plugin loads in; empty is
    unset (on)."""
    env = {**os.environ, "RADIANCE_PDL": value}
    r = subprocess.run([sys.executable, "-c", PDL_OFF], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"PDL {want}" in r.stdout


RENAME = """
import radiance_kernels.ops.registry as r
r._OPS["w4a8_gemm_v2"] = r._OPS.pop("w4a8_gemm")
from vllm.plugins import load_general_plugins
load_general_plugins()
print("SERVER WOULD START")
"""


def test_renamed_kernel_op_makes_the_plugin_refuse_loudly():
    r = subprocess.run([sys.executable, "-c", RENAME], capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "SERVER WOULD START" not in r.stdout
    assert "radiance-vllm refuses to register" in r.stderr and "op 'w4a8_gemm'" in r.stderr


@pytest.mark.parametrize("cfg,key", [({"bits": 3}, "bits"), ({"group_size": 64}, "group_size"), ({"krot": 0}, "krot")])
def test_unsupported_config_values_are_named(cfg, key):
    with pytest.raises(ValueError, match=f"quantization_config.{key}"):
        ParoQuantConfig.from_config({"quant_method": "paroquant", **cfg})


def test_paroquant_config_reads_zlab_format():
    c = ParoQuantConfig.from_config({"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": 8})
    assert (c.bits, c.group_size, c.krot) == (4, 128, 8)


def test_unknown_knob_stops_vllm_plugin_loading_naming_it():
    code = "from vllm.plugins import load_general_plugins; load_general_plugins(); print('SERVER WOULD START')"
    env = {**os.environ, "RADIANCE_PQ_I8": "1"}
    env.pop("_RADIANCE_SETTINGS_PRINTED", None)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode != 0 and "SERVER WOULD START" not in r.stdout
    assert "unknown Radiance knob(s) RADIANCE_PQ_I8" in r.stderr
