"""Who is calling: identity keys from request metadata, and the rules for an agent's alias."""
