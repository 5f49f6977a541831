import hashlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from radiance_quant import build, tiny
from radiance_quant.io import INDEX, REPORT, STATE, Checkpoint, CheckpointError


def _hashes(d, skip=(REPORT,)):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.name not in skip}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """4-layer, 2-shard synthetic bf16 checkpoint with an index."""
    return tiny.build_synthetic(
        tmp_path_factory.mktemp("synth") / "m", layers=4, hidden=128, intermediate=256, shards=2
    )


def test_reader_streams_sharded(synth):
    ck = Checkpoint(synth)
    assert len({ck.file_of(n).name for n in ck.names()}) == 2
    assert ck.spec("model.layers.3.mlp.down_proj.weight") == (torch.bfloat16, (128, 256))
    assert ck.get("model.layers.3.mlp.down_proj.weight", torch.bfloat16, (128, 256)).shape == (128, 256)
    with pytest.raises(
        CheckpointError,
        match=r"model-00002-of-00002.safetensors: tensor model.layers.3.mlp.down_proj.weight: "
        r"expected torch.float16 \[128, 256\], got torch.bfloat16 \[128, 256\]",
    ):
        ck.get("model.layers.3.mlp.down_proj.weight", torch.float16)
    with pytest.raises(CheckpointError, match="missing tensor model.layers.9.mlp.down_proj.weight"):
        ck.get("model.layers.9.mlp.down_proj.weight")


def test_reader_index_mismatch(synth, tmp_path):
    import shutil

    d = shutil.copytree(synth, tmp_path / "m")
    index = json.loads((d / INDEX).read_text())
    index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = "model-00002-of-00002.safetensors"
    (d / INDEX).write_text(json.dumps(index))
    with pytest.raises(
        CheckpointError,
        match="model-00002-of-00002.safetensors: tensor model.layers.0.mlp.up_proj.weight "
        "listed in model.safetensors.index.json is not in that shard",
    ):
        Checkpoint(d)
    (d / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(CheckpointError, match="model-00002-of-00002.safetensors: shard listed in .* is missing"):
        Checkpoint(d)


KILLER = textwrap.dedent("""
    import os, signal, sys
    from radiance_quant import build, io
    real, n = io.Job.write, [0]
    def write(self, unit, tensors):
        real(self, unit, tensors)
        n[0] += 1
        if n[0] == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)
    io.Job.write = write
    build.build(sys.argv[1], sys.argv[2], "int5", seed=0)
""")


def test_kill_and_resume_byte_identical(synth, tmp_path):
    ref = tmp_path / "ref"
    build.build(synth, ref, "int5", seed=0)
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-c", KILLER, str(synth), str(out), "3"])
    assert p.returncode == -9
    state = json.loads((out / STATE).read_text())
    assert sorted(state["done"]) == ["layers.0", "layers.1", "other"] and not (out / "config.json").exists()
    # a stale temp file and a half-written shard at a final name, as a crash of a non-atomic writer would leave
    (out / ".model-00004-of-00005.safetensors.tmp").write_bytes(b"junk")
    (out / "model-00004-of-00005.safetensors").write_bytes(b"\x08\x00\x00")
    r = build.build(synth, out, "int5", seed=0)
    assert r["units_resumed"] == ["other", "layers.0", "layers.1"]
    assert r["units_written"] == ["layers.2", "layers.3"]
    assert _hashes(out, skip=(REPORT, ".model-00004-of-00005.safetensors.tmp")) == _hashes(ref)
    # a recorded shard altered afterwards is detected by its digest and rewritten
    (out / "model-00002-of-00005.safetensors").write_bytes(b"x")
    assert build.build(synth, out, "int5", seed=0)["units_written"] == ["layers.0"]
    assert _hashes(out, skip=(REPORT, ".model-00004-of-00005.safetensors.tmp")) == _hashes(ref)


RSS = textwrap.dedent("""
    import json, resource, sys
    from radiance_quant import build
    import torch  # imports first: the baseline
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    build.build(sys.argv[1], sys.argv[2], sys.argv[3], seed=0)
    print(json.dumps({"base_kib": base, "peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
""")


def _peak_growth(src, out):
    p = subprocess.run(
        [sys.executable, "-c", RSS, str(src), str(out), "int4"],
        capture_output=True,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return (r["peak_kib"] - r["base_kib"]) * 1024


def test_peak_rss_bounded(tmp_path):
    """Peak RSS growth over the imports stays well under the checkpoint size (12 layers, 4 shards)."""
    src = tiny.build_synthetic(tmp_path / "s", layers=12, hidden=512, intermediate=1024, shards=4)
    size = sum(p.stat().st_size for p in src.glob("*.safetensors"))
    grow = _peak_growth(src, tmp_path / "o")
    print(f"peak RSS growth: {size / 2**20:.0f} MiB checkpoint -> {grow / 2**20:.0f} MiB")
    assert grow < 0.5 * size
