"""Backends deliver messages between components: ``local`` (threads) and ``ray`` (processes)."""
