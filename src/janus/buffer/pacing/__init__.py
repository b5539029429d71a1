"""The replay's rate limiter (ratio or queue mode): the only pacing of the data path."""
