"""The actor-model runtime: Worker, WorkerProxy, TrajectoryManager, Trainer, Orchestrator.

Components own their state and react to messages one at a time; a backend (``local`` threads or
``ray`` processes) delivers the messages. Bulk data flows Worker -> WorkerProxy -> TrajectoryManager
-> Trainer; the Orchestrator only sees counts.
"""
