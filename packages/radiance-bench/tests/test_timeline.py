"""The step profile (:mod:`radiance_bench.kernelbench.timeline`): kernel records from a Chrome trace, launches named
by role with exposed / gap / duration times that add up to the step, and :func:`chain.roles` against the launches
the toy chain really makes (under the interpreter, in a subprocess)."""

import json
import os
import subprocess
import sys

import pytest

from radiance_bench.kernelbench import timeline
from radiance_bench.kernelbench.timeline import Role

GEMM, NORM = ("_w4a8_",), ("_ss_partials", "_prologue")


def test_kernels_of_keeps_kernel_records_in_start_order():
    events = [{"cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 5.0, "dur": 1.0},
              {"cat": "kernel", "name": "b", "ts": 112.5, "dur": 3.0},
              {"cat": "kernel", "name": "a", "ts": 100.0, "dur": 10.0}]
    assert timeline.kernels_of(events) == [dict(name="a", start=0.0, end=10.0), dict(name="b", start=12.5, end=15.5)]
    with pytest.raises(RuntimeError, match="no kernel records"):
        timeline.kernels_of(events[:1])


def _k(name, start, end):
    return dict(name=name, start=start, end=end)


def test_attribute_sums_to_the_step_and_names_every_launch():
    roles = [Role("norm", NORM), Role("qkv", GEMM, 4_000_000), Role("norm", NORM), Role("down", GEMM, 2_000_000)]
    ks = [_k("fill", 0.0, 1.0),  # the step's zero fill: no role's
          _k("_ss_partials_kernel", 1.5, 3.0),  # 0.5 idle before it
          _k("_prologue_kernel", 2.0, 6.0),  # a programmatic dependent: starts before the one ahead of it ends
          _k("_w4a8_mma2_kernel", 5.0, 16.0),
          _k("_ss_partials_kernel", 15.0, 17.0), _k("_prologue_kernel", 16.0, 20.0),
          _k("_w4a8_mma2_kernel", 19.0, 25.0)]
    rows = timeline.attribute(ks, roles, read_TBps=4.0)
    got = {(r["role"], r["kernel"]): r for r in rows}
    assert [k["role"] for k in ks] == ["other", "norm", "norm", "qkv", "norm", "norm", "down"]
    assert sum(r["exposed_us"] for r in rows) == pytest.approx(25.0)  # the last end
    assert got[("norm", "_ss_partials_kernel")] == dict(role="norm", kernel="_ss_partials_kernel", launches=2,
                                                        exposed_us=3.0, gap_us=0.5, duration_us=3.5)
    assert got[("norm", "_prologue_kernel")]["exposed_us"] == pytest.approx(3.0 + 3.0)
    assert got[("qkv", "_w4a8_mma2_kernel")]["exposed_us"] == pytest.approx(10.0)
    assert got[("qkv", "_w4a8_mma2_kernel")]["duration_us"] == pytest.approx(11.0)
    assert got[("qkv", "_w4a8_mma2_kernel")]["limit_us"] == pytest.approx(1.0)  # 4 MB at 4 TB/s
    assert got[("down", "_w4a8_mma2_kernel")]["limit_us"] == pytest.approx(0.5)
    assert "limit_us" not in got[("other", "fill")]
    text = timeline.table(rows)
    assert "qkv" in text and text.splitlines()[-1].split()[-1] == "25.0"
    gemms = next(line.split() for line in text.splitlines() if line.startswith("all") and "_w4a8_mma2" in line)
    assert gemms[2:] == ["2", "15.0", "1.5", "10.00"]  # two launches, 10 + 5 us exposed, limits 1 + 0.5 us


def test_attribute_refuses_launches_that_miss_a_role():
    roles = [Role("norm", NORM), Role("qkv", GEMM), Role("down", GEMM)]
    with pytest.raises(RuntimeError, match="cover 2 of the step's 3 roles"):
        timeline.attribute([_k("_prologue_kernel", 0, 1), _k("_w4a8_kernel", 1, 2)], roles, 4.0)
    # a role with no launch of its own is not skipped: the GEMM is the first GEMM role's, the second has none
    with pytest.raises(RuntimeError, match="cover 2 of"):
        timeline.attribute([_k("_prologue_kernel", 0, 1), _k("_w4a8_kernel", 1, 2), _k("_prologue_kernel", 2, 3)],
                           roles, 4.0)


def test_plot_and_main_from_a_profile(tmp_path, capsys, monkeypatch):
    ks = [_k("_prologue_kernel", 0, 2), _k("_w4a8_kernel", 1, 9), _k("_prologue_kernel", 9, 10),
          _k("_w4a8_kernel", 9.5, 12)]
    rows = timeline.attribute(ks, [Role("norm", NORM, 0, 0), Role("qkv", GEMM, 16_000, 0), Role("norm", NORM, 0, 1),
                                   Role("qkv", GEMM, 16_000, 1)], 4.0)
    assert [k["layer"] for k in ks] == [0, 0, 1, 1]
    run = {"section": "stack_profile", "label": "int4 test", "step_us": 12.0, "untraced_us": 8.5, "limit_us": 0.008,
           "roles": rows, "launches": ks}
    import matplotlib.axes

    bars, real = [], matplotlib.axes.Axes.barh
    monkeypatch.setattr(matplotlib.axes.Axes, "barh", lambda ax, y, w, *a, **kw: (bars.append((y, w, kw.get("left"))),
                                                                                   real(ax, y, w, *a, **kw))[1])
    path = tmp_path / "kb.json"
    path.write_text(json.dumps({"meta": {}, "ceilings": {}, "results": [run, {"section": "stack", "x": 1}]}))
    timeline.main([str(tmp_path / "p"), str(path)])
    assert (tmp_path / "p-int4-test.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "int4 test: step 12.0 us traced, 8.5 untraced" in capsys.readouterr().out
    # the time line: layer 1's launches (the default window, layers 2 and 3, is absent here: none drawn)
    assert [b for b in bars if b[2] is not None] == []
    timeline.plot(str(tmp_path / "q.png"), run, layers=(1,))
    assert [b for b in bars if b[2] is not None] == [(0, 1.0, 0.0), (1, 2.5, 0.5)]


_RUN = """
import json
import triton.runtime.interpreter as interp
from radiance_bench.kernelbench import chain, timeline
from radiance_kernels.shapes import Proj

names = []
launch = interp.InterpretedFunction.run
def run(self, *args, **kwargs):
    names.append(self.fn.__name__)
    return launch(self, *args, **kwargs)
interp.InterpretedFunction.run = run

TOY = (Proj("attn.qkv", 256, (256, 128, 128), 1, 1), Proj("attn.o_proj", 256, (256,), 1, 1),
       Proj("mlp.gate_up", 256, (256, 256), 1, 1), Proj("mlp.down", 256, (256,), 1, 1),
       Proj("gdn.in_proj_qkvz", 256, (384, 128), 1, 1), Proj("gdn.out_proj", 256, (256,), 1, 1),
       Proj("gdn.in_proj_ba", 256, (8,), 1, 1))
layers, nbytes = chain.build(3, 4, TOY, count=4, device="cpu")
step = chain.step(layers, 3, "int8", defer=True)
step()  # tables, counters and the like made once
names.clear()
step()
ks = [dict(name=n, start=float(i), end=i + 1.0) for i, n in enumerate(names)]
rows = timeline.attribute(ks, chain.roles(layers), 4.0)
print(json.dumps(dict(names=names, rows=rows, nbytes=nbytes, layers=[k["layer"] for k in ks])))
"""


def test_chain_roles_follow_the_launches_the_step_makes():
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    run = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    rows = {(r["role"], r["kernel"]): r for r in got["rows"]}
    assert not [r for r in got["rows"] if r["role"] == "other"], got["names"][:20]
    assert rows[("in_proj_ba", "_skinny_kernel")]["launches"] == 3  # three GDN layers, one attention layer
    assert sum(r["launches"] for r in got["rows"] if r["role"] in ("qkv", "o_proj")) == 2
    assert sum(r["launches"] for r in got["rows"] if r["role"] == "down") == 4
    assert sum(r["launches"] for r in got["rows"]) == len(got["names"])
    assert got["layers"] == sorted(got["layers"]) and set(got["layers"]) == {0, 1, 2, 3}
    limits = {r["role"]: r["limit_us"] for r in got["rows"] if "limit_us" in r}
    assert sum(limits.values()) == pytest.approx(got["nbytes"] / 4e12 * 1e6)  # every weight byte, once
