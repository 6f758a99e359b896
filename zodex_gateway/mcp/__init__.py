"""The MCP surface: the SDK server around the tool dispatcher, the tools (schemas, the
worker tools, ``set_agent_alias``), how calls are recorded and given model context, the
instructions, and the JSON-RPC input rules. Transports are :mod:`zodex_gateway.serve`'s."""
