"""``janus train --seeds``: a run per seed in its own process, and their aggregate."""
