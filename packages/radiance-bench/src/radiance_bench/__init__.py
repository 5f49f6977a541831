"""radiance-bench. Checks the radiance-kernels op manifest at import: a renamed kernel fails here."""

import radiance_kernels

#: The kernel ops this package calls, with the exact versions it was written against.
REQUIRED_OPS = {"e4m3_encode": 1, "e4m3_decode": 1}

radiance_kernels.require("radiance-bench", REQUIRED_OPS)
