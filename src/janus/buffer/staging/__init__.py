"""The two ends of Dual-End Staging and the two operators between them and the experience buffer."""
