"""``zodex local connect``, the stdio bridge to the running Local runtime
(docs/modes.md#zodex-local-connect): :mod:`.stdio` reads and answers lines, :mod:`.forward`
takes requests to the runtime, :mod:`.http11` speaks HTTP to it, :mod:`.revisions` shapes
the bridge's own answers. None of them imports the MCP SDK, pydantic, an HTTP or ZeroMQ
library: a client's first answer costs little more than a Python start."""
