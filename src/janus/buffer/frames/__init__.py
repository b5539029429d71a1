"""Frame replay: stacked image observations with every frame stored once."""
