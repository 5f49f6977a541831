"""Compile the W4A8 / MXFP4 GEMM tile variants for sm_90 without a GPU and report what ptxas says.

``python tools/device/sm90_report.py [decode|prefill ...]`` (TRITON_INTERPRET unset). Per variant: registers,
spill bytes, stack, shared memory, how many of its programs an SM holds (:func:`programs_per_sm`: compare with a
config's ``occ``), and the SASS of the group loop (the longest loop): instructions per
iteration and warp-instructions per weight — with 4 schedulers per SM issuing one each per cycle, the
issue floor of a GEMM is ``N*K * that / (4 * 132 * clock)``; ptxas's "Potential Performance Loss" codes (C7514: wgmma
serialised, session 22); the MMA kind in the PTX (wgmma with the A
operand from registers or shared memory, mma.sync) and whether cp.async / TMA loads appear.
``[band[:name[,name...]]]`` limits the configs; decode also lists the ablation rows (``name:ablate``), the gemv and
mma2 configs their own kernels (:func:`gemv_variants`, :func:`mma2_variants`),
prefill with a ``predeq`` or ``blockwise`` config also the per-call unpack kernel (:func:`w4.unpack_w8`; no loop: its
figures are the whole program, one [128, UNPACK_BN] tile).
Figures depend on the Triton version (the GPU image runs 3.6: put a Triton 3.6 first on PYTHONPATH to
see what the GPU will run).
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

from radiance_kernels.ops.mxfp4_gemm.triton import _mxfp4_kernel
from radiance_kernels.ops.w4a8_gemm import tma_tiles
from radiance_kernels.ops.w4a8_gemm import triton as w4
from radiance_kernels.ops.w4a8_gemm.gemv import _w4a8_gemv_kernel
from radiance_kernels.ops.w4a8_gemm.mma2 import _w4a8_mma2_kernel
from radiance_kernels.ops.w4a8_gemm.reference import GROUP

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
CLOCK_GHZ = 1.98  # H200 boost
ABLATE = ("nib8x", "nib8xpr", "swap")  # the decode configs whose ablation rows are listed (as the bench's)
INSTR = r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)"  # an nvdisasm instruction line → its opcode
TYPES = {"a_ptr": "*u8", "as_ptr": "*fp32", "rs_ptr": "*fp32", "ws_ptr": "*fp32", "part_ptr": "*fp32",
         "sc_ptr": "*fp32", "out_ptr": "*bf16", "cnt_ptr": "*i32"}


def compile_sm90(kernel, constexprs: dict, num_warps: int, num_stages: int, int8: bool = False,
                 maxnreg: int | None = None):
    a8 = "*i8" if int8 else "*u8"  # the activations' and any 8-bit weight operand's (predeq) element
    types = {**TYPES, "a_ptr": a8, "w8_ptr": a8, **({"wq_ptr": a8} if constexprs.get("PREDEQ") else {})}
    if constexprs.get("STAGES"):  # the mma2 ring: a, wq, sz (int5: wh) as TMA descriptors (mma2.ring_descriptors)
        bm, bn = constexprs["BM"], constexprs["BN"]
        wt = [bn // 64, 16, 2, 32]  # the weight words' tile (mma2.ring_descriptors)
        types |= {"a_ptr": f"tensordesc<i64[{bm}, 16],{tma_tiles.layout([bm, 16], gl.int64)!r}>",
                  "wq_ptr": f"tensordesc<i32{wt},{tma_tiles.layout(wt, gl.int32)!r}>",
                  "sz_ptr": f"tensordesc<i32[{bn}],{tma_tiles.layout([bn], gl.int32, False)!r}>"}
        if constexprs["BITS"] == 5:  # the fifth-bit bytes' tiles
            types["wh_ptr"] = f"tensordesc<u8[16, {bn}],{tma_tiles.layout([16, bn], gl.uint8, False)!r}>"
    sig = {n: "constexpr" if n in constexprs else types.get(n, "*i32" if n.endswith("_ptr") else "i32")
           for n in kernel.arg_names}
    if kernel is _mxfp4_kernel:
        sig["ws_ptr"] = "*u8"
    # the launch's specialisation: 16-byte aligned pointers, ints divisible by 16 (the report's N, K, strides)
    div16 = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(kernel.arg_names)
             if sig[n] != "constexpr" and n not in kernel.do_not_specialize}
    source = GluonASTSource if kernel is _w4a8_mma2_kernel else ASTSource  # the Gluon kernel: its own front end
    return triton.compile(source(fn=kernel, signature=sig, constexprs=constexprs, attrs=div16),
                          target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "num_stages": num_stages,
                                                                      "maxnreg": maxnreg})


def ptxas_report(ptx: str) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    err = subprocess.run([os.path.join(BIN, "ptxas"), "--gpu-name=sm_90a", "-v", f.name, "-o", os.devnull],
                         capture_output=True, text=True).stderr
    os.unlink(f.name)
    num = lambda pat: int(re.search(pat, err).group(1))  # noqa: E731
    return {"regs": num(r"Used (\d+) registers"), "spill_st": num(r"(\d+) bytes spill stores"),
            "spill_ld": num(r"(\d+) bytes spill loads"), "stack": num(r"(\d+) bytes stack frame"),
            "losses": re.findall(r"\((C\d+)\) Potential Performance Loss", err)}


def programs_per_sm(regs: int, smem: int, num_warps: int) -> int:
    """How many programs of a launch an H100 / H200 SM holds at once: its 64 K registers (allocated per warp in
    units of 256, i.e. a thread's count rounded up to 8), 228 KB of shared memory (1 KB reserved per program), 64
    warps, 32 programs. A config whose ``occ`` sizes the grid for more runs a second wave."""
    by_regs = 65536 // (num_warps * 32 * (-(-regs // 8) * 8))
    by_smem = 228 * 1024 // (smem + 1024)
    return min(by_regs, by_smem, 64 // num_warps, 32)


def loop_sass(cubin: bytes) -> tuple[int, Counter]:
    """Instruction count and opcode histogram of the group loop: the first backward-branch loop of more than
    16 instructions (the ZPE epilogue's and the split reduction's loops come after it; the ZPE one can be
    the longer, e.g. with ``predeq``); the whole program where there is none (the unpack kernel: one tile)."""
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin", delete=False) as f:
        f.write(cubin)
    sass = subprocess.run([os.path.join(BIN, "nvdisasm"), "-c", f.name], capture_output=True, text=True).stdout
    os.unlink(f.name)
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", line))}
    loops = []  # opcodes of each loop, in program order
    for i, line in enumerate(lines):
        m = re.search(r"BRA `?\(?(\.L_x_\d+)", line)
        if m and labels.get(m.group(1), i) < i:
            loops.append([op.group(1) for body in lines[labels[m.group(1)]:i + 1] if (op := re.match(INSTR, body))])
    long = [ops for ops in loops if len(ops) > 16]
    ops = long[0] if long else [op.group(1) for line in lines if (op := re.match(INSTR, line))]
    return len(ops), Counter(ops)


def mma_kind(ptx: str) -> str:
    """wgmma (A from registers ``rA`` or shared ``sA``, shape), mma.sync (shape, A element), and the async copies
    used."""
    kinds = []
    wgmma = r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)[^\n]*?\{[^}]*\},\s*(\{|%rd)"  # acc, then A
    for m in sorted(set(re.findall(wgmma, ptx))):
        kinds.append(f"wgmma.{m[0]}{'.rA' if m[1] == '{' else '.sA'}")
    mma = r"mma\.sync\.aligned\.(m\d+n\d+k\d+)\.row\.col\.(?:satfinite\.)?\w+\.(\w+)\."  # shape, A's element
    for shape, el in sorted(set(re.findall(mma, ptx))):
        kinds.append(f"mma.sync.{shape}.{el}")
    kinds += [name for name, pat in (("cp.async", "cp.async.ca" if "cp.async.ca" in ptx else "cp.async.cg"),
                                     ("tma", "cp.async.bulk.tensor")) if pat in ptx]
    return ",".join(kinds) or "no-mma"


def w4a8_variants(band: str, only: list[str] | None = None) -> list[tuple[str, object, dict, dict]]:
    """(name, kernel, constexprs, launch options) for the configs :func:`w4.config` gives the band."""
    out = []
    names = dict(w4.DECODE if band == "decode" else w4.PREFILL)
    if band == "decode":
        names |= {f"{n}:{ab}": {**w4.DECODE[n], "ablate": ab} for n in ABLATE for ab in ("nodot", "noload")}
    for name in only or names:
        if names[name].get("blockwise"):  # a library call, no kernel of ours past the unpack (listed below)
            continue
        if names[name].get("wgmma"):  # the Gluon Hopper kernel: compiled by test_wgmma_compiles_for_sm90
            continue
        if names[name].get("gemv"):
            out += gemv_variants(name, names[name])
            continue
        if names[name].get("mma2"):
            out += mma2_variants(name, names[name])
            continue
        cfg = w4.config(16 if band == "decode" else 2048, 14336, 5120, band, False, names[name])
        split = 0 if cfg["splits"] == 1 else 1 if cfg["reduce"] == "host" else 2
        tiles = dict(SPLIT=split, RW=cfg["rw"], HW=True, BM=cfg["BM"], BN=cfg["BN"], BK=GROUP, KS=cfg["KS"],
                     GROUP_M=cfg["GROUP_M"])
        opts = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], maxnreg=cfg["maxnreg"])
        elems = [("int4 e4m3 group", 4, False, True, False), ("int5 e4m3 token", 5, False, False, False),
                 ("int4 int8 group ZPE", 4, True, True, True)]
        for label, bits, int8, grouped, zpe in elems:
            if ":" in name and label != "int4 e4m3 group":
                continue
            ce = dict(BITS=bits, INT8=int8, GROUP_AS=grouped, ZPE=zpe, DOT16=cfg["dot16"], NIB8=cfg["nib8"], BG=16,
                      ZPE_PREC="tf32x3", SWAP=cfg["swap"], ABLATE=w4.ABLATIONS[cfg["ablate"]], APRE=cfg["apre"],
                      PREDEQ=cfg["predeq"], **tiles)
            out.append((f"w4a8 {band} {name} {label}", w4._w4a8_kernel, ce, {**opts, "int8": int8},
                        cfg["BN"] * GROUP))
        if not (cfg["swap"] or cfg["apre"] or cfg["predeq"] or ":" in name):  # mxfp4: no swap / apre / predeq / ablate
            out.append((f"mxfp4 {band} {name}", _mxfp4_kernel, tiles, opts, cfg["BN"] * GROUP))
    if any(names[n].get("predeq") or names[n].get("blockwise") for n in only or names):  # the per-call unpack
        for label, bits, int8, zfold, scales in (("int4 e4m3", 4, False, False, False),
                                                 ("int5 e4m3", 5, False, False, False),
                                                 ("int4 int8", 4, True, False, False),
                                                 ("int4 int8 scales", 4, True, False, True),
                                                 ("int4 e4m3 zfold", 4, False, True, False)):
            ce = dict(BITS=bits, INT8=int8, HW=True, ZFOLD=zfold, SCALES=scales, BK=GROUP, BN=w4.UNPACK_BN)
            out.append((f"w4a8 unpack_w8 {label}", w4._unpack_w8_kernel, ce,
                        dict(num_warps=4, num_stages=3, maxnreg=None, int8=int8), GROUP * w4.UNPACK_BN))
    return out


def gemv_variants(name: str, knobs: dict) -> list:
    """The CUDA-core decode kernel (:mod:`w4a8_gemm.gemv`), int8 and e4m3 activations, at M = 1, 4, 8, 16 (int4)
    and 8 (int5)."""
    out = []
    for (M, bits), int8 in itertools.product(((1, 4), (4, 4), (8, 4), (16, 4), (8, 5)), (True, False)):
        cfg = w4.config(M, 14336, 5120, "decode", False, knobs)
        ce = dict(BITS=bits, INT8=int8, GROUP_AS=True, SPLIT=2, RW=cfg["rw"],
                  HW=True, BM=cfg["BM"], BN=cfg["BN"], BK=GROUP, PTX=True, TRIGGER=False)
        opts = dict(num_warps=cfg["num_warps"], num_stages=cfg["num_stages"], maxnreg=None, int8=int8)
        out.append((f"w4a8 decode {name} M={M} int{bits} {'int8' if int8 else 'e4m3'} group", _w4a8_gemv_kernel, ce,
                    opts, cfg["BN"] * GROUP))
    return out


def mma2_variants(name: str, knobs: dict) -> list:
    """The mma.sync decode kernel (:mod:`w4a8_gemm.mma2`, Gluon), int4 at M = 16 (swap-AB: 8; wg: 8, 16 and 64), both
    activation elements per-group; ring configs also int5 (8-bit operands: int8 activations; not wg)."""
    out = []
    for m in (8, 16, 64) if knobs.get("wg") else (8 if knobs.get("swap") else 16,):
        cfg = w4.config(m, 14336, 5120, "decode", False, knobs)
        widths = (4, 5) if cfg["ring"] and not cfg["wg"] else (4,)
        for bits, int8 in itertools.product(widths, (False, True)):
            if bits == 5 and cfg["k8"] and not int8:  # int5 on 8-bit operands: int8 activations only
                continue
            ce = dict(BITS=bits, INT8=int8, GROUP_AS=True, SPLIT=2, RW=cfg["rw"], HW=True, BM=cfg["BM"], BN=cfg["BN"],
                      BK=GROUP, PF=cfg["pf"], K8=cfg["k8"], STAGES=cfg["ring"], GPS=16 if cfg["ring"] else 1, ABLATE=0,
                      SWAP=cfg["swap"], TRIGGER=False, WG=cfg["wg"])
            opts = dict(num_warps=cfg["num_warps"], num_stages=1, maxnreg=cfg["maxnreg"], int8=int8)
            tag = f" M={m}" if cfg["wg"] else ""
            out.append((f"w4a8 decode {name}{tag} int{bits} {'int8' if int8 else 'e4m3'} group", _w4a8_mma2_kernel,
                        ce, opts, cfg["BN"] * GROUP))
    return out


def main(argv: list[str]) -> int:
    for arg in argv or ["decode", "prefill"]:
        band, _, names = arg.partition(":")
        for name, kernel, ce, opts, weights in w4a8_variants(band, names.split(",") if names else None):
            c = compile_sm90(kernel, ce, **opts)
            rep = ptxas_report(c.asm["ptx"])
            n, hist = loop_sass(c.asm["cubin"])
            top = " ".join(f"{k}:{v}" for k, v in hist.most_common(8))
            fit = programs_per_sm(rep["regs"], c.metadata.shared, opts["num_warps"])
            print(f"{name:44s} {mma_kind(c.asm['ptx']):28s} regs {rep['regs']:3d} "
                  f"spill {rep['spill_st']}/{rep['spill_ld']} B stack {rep['stack']} smem {c.metadata.shared} "
                  f"{fit}/SM "
                  f"{' '.join(rep['losses'])} | loop {n} instr, {n * opts['num_warps'] / weights:.3f} "
                  f"warp-instr/weight | {top}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
