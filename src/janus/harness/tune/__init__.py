"""``janus tune``: the search over the data-path knobs and the command around it."""
