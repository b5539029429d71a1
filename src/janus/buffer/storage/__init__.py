"""Where the data lives: ring storage at a placement, host memory, device transfers, checkpoint files."""
