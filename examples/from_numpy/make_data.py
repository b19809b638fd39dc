#!/usr/bin/env python3
"""Writes x.npy and y.npy beside this script: the arrays examples/from_numpy/train.cpp learns.

    /usr/bin/python3 examples/from_numpy/make_data.py   # Debian: apt-get install python3-numpy

512 points x in [-3, 3)^2 and targets y = sin(x0) + x1^2 / 3, float32; 6 kB in all.
"""
import os

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
rng = np.random.default_rng(0)
x = rng.uniform(-3, 3, size=(512, 2)).astype(np.float32)
y = (np.sin(x[:, :1]) + x[:, 1:] ** 2 / 3).astype(np.float32)
np.save(os.path.join(here, "x.npy"), x)
np.save(os.path.join(here, "y.npy"), y)
print(f"x {x.shape} and y {y.shape} written to {here} with NumPy {np.__version__}")
