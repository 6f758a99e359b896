"""The workers of one runtime: the runtime directory, the supervisor that spawns and watches
workers, the restart policy, the ZeroMQ client, and the dispatcher the tools call."""
