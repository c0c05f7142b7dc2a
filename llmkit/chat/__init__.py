"""Messages → model: the chat template, tools (``@tool``, schemas, running a call), the Messages-style
client, the agent loop, and the trace with its bill."""
