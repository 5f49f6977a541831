"""Kernel benches on a GPU (issue 6): Radiance's Triton kernels against the device's own ceilings and
the best peers, side by side in one run, timed inside CUDA graphs and fed from DRAM.

Runs from source on a bare GPU machine (torch + Triton, no vLLM):
``PYTHONPATH=packages/radiance-kernels/src:packages/radiance-bench/src python -m radiance_bench.kernelbench.run``.
"""
