"""Interrupted capture and training resume to exactly the bytes of an uninterrupted run."""

from __future__ import annotations

import filecmp
import shutil

import pytest

from radiance_drafter.capture import CaptureSet, capture
from radiance_drafter.config import drafter_config_for_target
from radiance_drafter.model import DFlashDrafter, save_drafter
from radiance_drafter.target import Sampling, TargetRunner
from radiance_drafter.tinyloop import round_robin
from radiance_drafter.train import TrainConfig, train

SAMPLING = Sampling(temperature=0.8, top_p=0.95, max_tokens=24, seed=3)


@pytest.fixture(scope="module")
def small(tiny_target, prompts, tmp_path_factory):
    work = tmp_path_factory.mktemp("resume")
    subset = round_robin(prompts)[:6]
    capture(subset, tiny_target, work / "cap-a", (0, 1), SAMPLING, shard_size=2)
    return work, subset


def _same_files(a, b) -> None:
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    match, mismatch, errors = filecmp.cmpfiles(a, b, [n for n in names if (a / n).is_file()], shallow=False)
    assert not mismatch and not errors, (mismatch, errors)


def test_capture_resumes_identically(small, tiny_target, monkeypatch):
    work, subset = small
    calls = {"n": 0}
    hidden = TargetRunner.hidden

    def crash_on_fourth(self, ids):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt("simulated interruption in the second shard")
        return hidden(self, ids)

    monkeypatch.setattr(TargetRunner, "hidden", crash_on_fourth)
    with pytest.raises(KeyboardInterrupt):
        capture(subset, tiny_target, work / "cap-b", (0, 1), SAMPLING, shard_size=2)
    assert len(CaptureSet(work / "cap-b")) == 2  # the first shard survived; the partial one did not
    monkeypatch.setattr(TargetRunner, "hidden", hidden)
    capture(subset, tiny_target, work / "cap-b", (0, 1), SAMPLING, shard_size=2)
    _same_files(work / "cap-a", work / "cap-b")
    data = CaptureSet(work / "cap-b")
    assert [s["source"] for _, s in data.samples] == [p.source for p in subset]
    assert all(s["seed"] for _, s in data.samples)


def test_training_resumes_identically(small, tiny_target):
    work, _ = small
    cfg = drafter_config_for_target(tiny_target, num_layers=1, target_layer_ids=(0, 1), block_size=4,
                                    mask_token_id=0, num_key_value_heads=4)
    save_drafter(DFlashDrafter(cfg).init_weights(1), work / "init")
    tc = TrainConfig(epochs=2, batch_size=2, blocks_per_seq=4, lr=1e-3, warmup_steps=2, ckpt_every=2,
                     offload_optimizer=True)
    full = train(work / "init", work / "cap-a", tiny_target, work / "run-a", tc)
    assert full["finished"] and full["steps"] == 6
    part = train(work / "init", work / "cap-a", tiny_target, work / "run-b", tc, max_steps=5)
    assert not part["finished"] and part["steps"] == 5
    ckpts = sorted((work / "run-b" / "ckpt").iterdir())
    assert [c.name for c in ckpts] == ["step-0000004", "step-0000005"]
    shutil.rmtree(ckpts[-1])  # killed after step 5, before its checkpoint: resume redoes step 5
    train(work / "init", work / "cap-a", tiny_target, work / "run-b", tc)
    _same_files(work / "run-a" / "drafter", work / "run-b" / "drafter")
    assert (work / "run-a" / "loss.json").read_text() == (work / "run-b" / "loss.json").read_text()
    assert (work / "run-b" / "loss.png").stat().st_size > 1000
