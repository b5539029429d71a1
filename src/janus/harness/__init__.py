"""Harness: run configurations, measure them and report the results."""
