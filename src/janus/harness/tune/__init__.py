"""``janus tune``: the search over the data-path knobs (throughput), or over the algorithm's hyperparameters
with them (time to solve), and the command around it."""
