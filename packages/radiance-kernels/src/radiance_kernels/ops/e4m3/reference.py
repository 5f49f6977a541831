"""Reference e4m3 codec ops: the format functions themselves."""

from radiance_kernels.formats.e4m3 import decode, encode

__all__ = ["encode", "decode"]
