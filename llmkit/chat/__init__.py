"""Messages → model: the chat template, tools, the Messages-style client, the agent loop, and the
trace with its bill.

The public names, by module (imported from there, so ``import llmkit.chat.tools`` stays light):

    llmkit.chat.markers       MARKERS, marker_ids: the control tokens and their ids
    llmkit.chat.template      render, Rendered, stop_tokens, tool_line, server_result_ids
    llmkit.chat.tool_signature tool_definitions (the one reader of a tool list), signature, summary
    llmkit.chat.parse         parse_assistant: generated tokens back to content blocks
    llmkit.chat.tools         @tool, Tool, run_tool_call, tool_result, validate_arguments, tools_by_name
    llmkit.chat.client        Client (client.messages.create / stream / render)
    llmkit.chat.message       Message, ContentDelta, ContextWindowError (what a request gives back)
    llmkit.chat.agent         run_agent, AgentResult: the one harness loop (call, run tools, repeat)
    llmkit.chat.trace         Trace, Event, Bill, Prices
    llmkit.chat.constrained   ToolCallConstraint: decoding that keeps a tool call valid JSON for its schema

Behind the client: ``context`` (the context-window policy), ``server_tools`` (tools the client runs
inside a request), ``reply`` (generated tokens to blocks, deltas and usage); behind the agent:
``agent_context`` (making room in a long run) and ``deadline`` (tool time limits).
"""
