"""What runs report: tables, charts, learning curves, TensorBoard, W&B, progress, the live log."""
