from radiance_vllm.server import hermetic_env, shared_cache_root


def test_servers_share_one_vllm_cache_root_and_keep_their_own_temp(tmp_path):
    a, b = hermetic_env(tmp_path / "a"), hermetic_env(tmp_path / "b", {"VLLM_CACHE_ROOT": "/elsewhere"})
    assert a["VLLM_CACHE_ROOT"] == str(shared_cache_root()) and shared_cache_root().is_dir()
    assert not shared_cache_root().is_relative_to(tmp_path)
    assert b["VLLM_CACHE_ROOT"] == "/elsewhere"  # an explicit override still wins
    assert a["TMPDIR"] != b["TMPDIR"] and a["HF_HUB_OFFLINE"] == b["HF_HUB_OFFLINE"] == "1"
