"""The MCP surface: the server and its tool handlers, the tool schemas, the HTTP guard and
the JSON-RPC input checks."""
