"""The compiled (numba) CPU kernels of the replay and frame replay, and their on-disk cache."""
