#!/usr/bin/env python3
"""Writes the .npy / .npz fixtures of tests/data_loading/fixtures with NumPy itself.

    /usr/bin/python3 scripts/make_npy_fixtures.py   # Debian: apt-get install python3-numpy

The C++ tests (tests/data_loading/test_npy_fixtures.cpp) rebuild each array from the same
formula and check that cppgrad reads it back equal; the files are a few hundred bytes each.
"""
import os

import numpy as np

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data_loading", "fixtures")
os.makedirs(out, exist_ok=True)


def path(name):
    return os.path.join(out, name)


# The formulas the tests repeat: exact in float32, negative and fractional values, large int64s.
f32 = np.arange(6, dtype=np.float32).reshape(2, 3) * 0.5 - 1            # (2, 3)
f64 = np.arange(12, dtype=np.float64).reshape(3, 4) / 8 - 0.75          # (3, 4)
i64 = np.array([0, 1, -2, 2**40 + 3, -(2**62), 2**63 - 1], dtype=np.int64)
b = np.array([True, False, False, True, True], dtype=np.bool_)
f32_3d = np.arange(12, dtype=np.float32).reshape(2, 3, 2) - 5.5         # (2, 3, 2)

np.save(path("f4.npy"), f32)
np.save(path("f8.npy"), f64)
np.save(path("i8.npy"), i64)
np.save(path("b1.npy"), b)
np.save(path("f8_fortran.npy"), np.asfortranarray(f64))
np.save(path("f4_3d_fortran.npy"), np.asfortranarray(f32_3d))
np.save(path("f4_big.npy"), f32.astype(">f4"))
np.save(path("f8_big_fortran.npy"), np.asfortranarray(f64.astype(">f8")))
np.save(path("i8_big.npy"), i64.astype(">i8"))
np.save(path("scalar.npy"), np.float64(2.5))
np.save(path("empty.npy"), np.zeros((0, 3), dtype=np.float32))
with open(path("f4_v2.npy"), "wb") as f:
    np.lib.format.write_array(f, f32, version=(2, 0))
with open(path("f4_v3.npy"), "wb") as f:
    np.lib.format.write_array(f, f32, version=(3, 0))
np.savez(path("arrays.npz"), x=f32, y=i64, mask=b)
np.savez_compressed(path("arrays_compressed.npz"), x=f32, y=i64, mask=b)
np.savez(path("positional.npz"), f64, b)  # named arr_0, arr_1
# What must be refused: an object array (pickled Python objects) and an unsupported dtype.
np.save(path("object.npy"), np.array([1, "a", None], dtype=object), allow_pickle=True)
np.save(path("i4.npy"), np.arange(3, dtype=np.int32))
print(f"wrote the fixtures to {os.path.normpath(out)} with NumPy {np.__version__}")
