"""The experience buffer: ring storage read by a sampler (uniform or prioritized), its input checks."""
