"""Fleet mode: worker hosts (``zodex host serve``) and the gateways that route to them
(``zodex gateway serve``) over ZeroMQ with CURVE (docs/fleet.md)."""
