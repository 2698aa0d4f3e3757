"""MCP sources: import third-party tool catalogs, screen them, serve tool search over MCP."""
