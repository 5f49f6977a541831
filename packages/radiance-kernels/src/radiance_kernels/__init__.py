"""radiance-kernels: number formats, torch reference ops (the numerical spec), Triton kernels and the
``torch.ops.radiance`` custom ops. ``manifest()`` lists the provided ops and their versions."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("radiance-kernels")
except PackageNotFoundError:  # running from source (PYTHONPATH), e.g. on the bare GPU machine
    __version__ = "0.1.0+src"

from radiance_kernels import ops  # noqa: E402,F401  (registers every op)
from radiance_kernels.backends import BACKENDS, BackendUnavailableError, available_backends  # noqa: E402
from radiance_kernels.manifest import manifest, require  # noqa: E402

__all__ = ["BACKENDS", "BackendUnavailableError", "available_backends", "manifest", "require", "__version__"]
