"""Number formats and weight layouts: e4m3, e2m1 + e8m0 (MX), AWQ int4 / int5 bit-plane, rotations."""
