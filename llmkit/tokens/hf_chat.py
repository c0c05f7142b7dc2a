"""The course chat template as a Jinja template, for Hugging Face's ``apply_chat_template``.

``llmkit.chat.template.render`` is the definition: it places the control tokens around each
piece of a conversation. Engines such as vLLM and TGI cannot run our Python, but they all run
the Jinja template stored in ``tokenizer_config.json``, so this file writes the same rules in
Jinja. ``tests/test_export.py`` proves the two equal, string for string and id for id, on the
course's synthetic conversations.

It takes what ``render`` takes (Messages-API messages, ``tools`` as definitions, a ``system``
variable) and also the shapes the OpenAI-style servers pass: a first message with role
``system``, tools as ``{"type": "function", "function": {...}}``, assistant ``tool_calls``
(arguments as a dict) and ``tool`` messages with the results.

Two things a string template cannot do like ``render``. ``render`` encodes each piece of text on
its own, so text that looks like a control token stays ordinary text; a Jinja template makes one
string, and the tokenizer would read ``<|end_turn|>`` typed by a user as the real marker. So the
template refuses such text with an error rather than let a user fake a turn, unless the caller
passes ``sanitize_control_tokens=True`` to ``apply_chat_template``, which makes ``transformers``
encode the tokens it finds in the inputs as ordinary text. And two text blocks in a row are
tokenized together (``render`` tokenizes them apart), which can join a token across the seam;
the course's conversations never put two text blocks side by side.
"""
from __future__ import annotations

import json

CHAT_MARKERS = ("<|system|>", "<|user|>", "<|assistant|>", "<|tools|>", "<|thinking|>", "<|end_thinking|>",
                "<|tool_call|>", "<|end_tool_call|>", "<|tool_result|>", "<|end_tool_result|>", "<|end_turn|>")

_TEMPLATE = r"""
{#- The course chat template (llmkit.chat.template.render), for apply_chat_template. -#}
{%- set special_tokens = __SPECIAL_TOKENS__ -%}

{%- macro text(piece) -%}
  {#- Text that holds a control token is refused, unless apply_chat_template(..., sanitize_control_tokens=True)
      has wrapped that token in its private-use markers (then the tokenizer encodes it as ordinary text). -#}
  {%- if piece is not string -%}
    {{- raise_exception("message text must be a string, got " ~ piece|tojson) -}}
  {%- endif -%}
  {%- set check = namespace(bare=piece) -%}
  {%- for token in special_tokens -%}
    {%- set check.bare = check.bare.replace("\U000f0000" ~ token ~ "\U000f0001", "") -%}
  {%- endfor -%}
  {%- for token in special_tokens -%}
    {%- if token in check.bare -%}
      {{- raise_exception("the text " ~ piece[:60]|tojson ~ " contains the control token " ~ token ~ "; pass "
          ~ "sanitize_control_tokens=True to apply_chat_template so that it is encoded as ordinary text") -}}
    {%- endif -%}
  {%- endfor -%}
  {{- piece -}}
{%- endmacro -%}

{%- macro compact(value, drop_descriptions) -%}
  {%- if value is mapping -%}
    {%- set parts = namespace(items=[]) -%}
    {%- for key, item in value.items() -%}
      {%- if not (drop_descriptions and key == "description") -%}
        {%- set parts.items = parts.items + [key|tojson ~ ":" ~ compact(item, drop_descriptions)] -%}
      {%- endif -%}
    {%- endfor -%}
    {{- "{" ~ parts.items|join(",") ~ "}" -}}
  {%- elif value is string or value is not iterable -%}
    {{- value|tojson -}}
  {%- else -%}
    {%- set parts = namespace(items=[]) -%}
    {%- for item in value -%}
      {%- set parts.items = parts.items + [compact(item, drop_descriptions)] -%}
    {%- endfor -%}
    {{- "[" ~ parts.items|join(",") ~ "]" -}}
  {%- endif -%}
{%- endmacro -%}

{%- macro is_word_char(char) -%}
  {{- "yes" if (char.isalnum() or char == "_") else "" -}}
{%- endmacro -%}

{%- macro is_abbreviation(word) -%}
  {#- "e.g.", "Dr." and the like, or letters with dots such as "U.S.": a dot that ends no sentence. -#}
  {%- set word = word.lstrip("(\"'") -%}
  {%- set dotted = namespace(ok=(word|length >= 4 and word|length is even)) -%}
  {%- for i in range(0, word|length, 2) if dotted.ok -%}
    {%- set dotted.ok = is_word_char(word[i]) and word[i + 1] == "." -%}
  {%- endfor -%}
  {{- "yes" if (word.endswith(("e.g.", "i.e.", "cf.", "vs.", "approx.", "Mr.", "Mrs.", "Ms.", "Dr.", "St."))
      or dotted.ok) else "" -}}
{%- endmacro -%}

{%- macro summary(description) -%}
  {#- The first sentence: up to the first ".", "!" or "?" before a space (or the end) that is not an
      abbreviation's dot; all of it if there is none. On one line. -#}
  {%- set words = description.split() -%}
  {%- set found = namespace(n=words|length) -%}
  {%- for word in words -%}
    {%- if found.n == words|length and word[-1] in ".!?" and not is_abbreviation(word) -%}
      {%- set found.n = loop.index -%}
    {%- endif -%}
  {%- endfor -%}
  {{- words[:found.n]|join(" ") -}}
{%- endmacro -%}

{%- macro type_text(prop) -%}
  {%- set keys = (prop|list|reject("in", ["description", "default"])|sort) if prop is mapping else none -%}
  {%- if keys == ["type"] and prop["type"] in ["string", "integer", "number", "boolean"] -%}
    {{- prop["type"] -}}
  {%- elif keys in (["enum"], ["enum", "type"]) and prop["enum"] is sequence and prop["enum"] is not string
        and prop["enum"] is not mapping and prop["enum"]|length > 0 -%}
    {%- set parts = namespace(items=[]) -%}
    {%- for value in prop["enum"] -%}
      {%- set parts.items = parts.items + [compact(value, false)] -%}
    {%- endfor -%}
    {{- parts.items|join("|") -}}
  {%- elif keys == ["items", "type"] and prop["type"] == "array" -%}
    {%- set inner = type_text(prop["items"]) -%}
    {{- ("(" ~ inner ~ ")[]") if "|" in inner else (inner ~ "[]") -}}
  {%- else -%}
    {{- compact(prop, true) -}}
  {%- endif -%}
{%- endmacro -%}

{%- macro is_parameter_name(name) -%}
  {%- set check = namespace(ok=(name is string and name|length > 0)) -%}
  {%- for char in (name if check.ok else "") -%}
    {%- set check.ok = check.ok and (is_word_char(char) or char == "-") -%}
  {%- endfor -%}
  {{- "yes" if check.ok else "" -}}
{%- endmacro -%}

{%- macro signature(schema) -%}
  {#- Short when every parameter fits the notation; compact JSON (without descriptions) otherwise. -#}
  {%- set allowed = ["type", "properties", "required", "additionalProperties", "description"] -%}
  {%- set simple = namespace(ok=schema.get("type") == "object" and (schema|list|reject("in", allowed)|list|length == 0)
        and schema.get("additionalProperties", false) is false and schema.get("properties", {}) is mapping) -%}
  {%- for name in (schema.get("properties", {}) if simple.ok else []) -%}
    {%- set simple.ok = simple.ok and is_parameter_name(name) -%}
  {%- endfor -%}
  {%- if simple.ok -%}
    {%- set required = schema.get("required", []) -%}
    {%- set parts = namespace(items=[]) -%}
    {%- for name, prop in schema.get("properties", {}).items() -%}
      {%- set has_default = prop is mapping and "default" in prop -%}
      {%- set default = (" = " ~ compact(prop["default"], false)) if has_default else "" -%}
      {%- set optional = "" if (name in required or has_default) else "?" -%}
      {%- set parts.items = parts.items + [name ~ optional ~ ": " ~ type_text(prop) ~ default] -%}
    {%- endfor -%}
    {{- parts.items|join(", ") -}}
  {%- else -%}
    {{- compact(schema, true) -}}
  {%- endif -%}
{%- endmacro -%}

{%- macro tool_line(tool) -%}
  {%- if tool is mapping and tool.get("type") == "function" and tool["function"] is mapping -%}
    {%- set name = tool["function"]["name"] -%}
    {%- set description = tool["function"].get("description") or "" -%}
    {%- set schema = tool["function"].get("parameters") or {} -%}
  {%- elif tool is mapping -%}
    {%- set name, description, schema = tool.get("name"), tool.get("description"), tool.get("input_schema") -%}
  {%- endif -%}
  {%- if name is not string or not name or description is not string or schema is not mapping -%}
    {{- raise_exception("a tool needs a name, a description and an input_schema (or the OpenAI function "
        ~ "shape), got " ~ tool|tojson) -}}
  {%- endif -%}
  {%- set valid = namespace(ok=name|length <= 64) -%}
  {%- for char in name -%}
    {%- set valid.ok = valid.ok and char in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-" -%}
  {%- endfor -%}
  {%- if not valid.ok -%}
    {{- raise_exception("the tool name " ~ name|tojson ~ " is not 1 to 64 letters, digits, '_' or '-'") -}}
  {%- endif -%}
  {{- name ~ "(" ~ signature(schema) ~ "): " ~ summary(description) -}}
{%- endmacro -%}

{%- macro result(content, is_error) -%}
  {%- if is_error is not boolean -%}
    {{- raise_exception("is_error must be true or false, got " ~ is_error|tojson) -}}
  {%- endif -%}
  {%- if content is not string -%}
    {%- set parts = namespace(items=[]) -%}
    {%- for part in content -%}
      {%- if part is not mapping or part.get("type") != "text" or part.get("text") is not string -%}
        {{- raise_exception("a tool result's content must be a string or a list of text blocks") -}}
      {%- endif -%}
      {%- set parts.items = parts.items + [part["text"]] -%}
    {%- endfor -%}
    {%- set content = parts.items|join("") -%}
  {%- endif -%}
  {{- "<|tool_result|>" ~ text(("Error: " if is_error else "") ~ content) ~ "<|end_tool_result|>" -}}
{%- endmacro -%}

{%- macro tool_call(name, arguments) -%}
  {%- if arguments is string -%}
    {%- set call = arguments -%}
  {%- elif name is string and name and arguments is mapping -%}
    {%- set call = {"name": name, "input": arguments}|tojson -%}
  {%- else -%}
    {{- raise_exception("a tool call needs a name and a dict of arguments, got " ~ name|tojson) -}}
  {%- endif -%}
  {{- "<|tool_call|>" ~ text(call) ~ "<|end_tool_call|>" -}}
{%- endmacro -%}

{#- ---- the conversation ---- -#}
{%- set state = namespace(system=(system if system is defined else none), start=0, pending=[], answered=[],
                        in_text=false) -%}
{%- if messages and messages[0]["role"] == "system" -%}
  {%- set first = messages[0]["content"] -%}
  {%- set state.system = first if first is string else (first|map(attribute="text")|join("")) -%}
  {%- set state.start = 1 -%}
{%- endif -%}
{%- set conversation = messages[state.start:] -%}
{%- if state.system -%}
  {{- "<|system|>" ~ text(state.system) -}}
{%- endif -%}
{%- if tools -%}
  {%- set lines = namespace(items=[]) -%}
  {%- for tool in tools -%}
    {%- set lines.items = lines.items + [tool_line(tool)] -%}
  {%- endfor -%}
  {{- "<|tools|>" ~ text(lines.items|join("\n")) -}}
{%- endif -%}

{%- for message in conversation -%}
  {%- set role = message["role"] -%}
  {%- set content = message.get("content") -%}
  {%- set blocks = [{"type": "text", "text": content}] if content is string
        else ([] if content is none else content) -%}
  {%- set answer_id = message.get("tool_call_id") if role == "tool" else none -%}
  {%- if role == "user" and content is not string and content is not none and not content -%}
    {{- raise_exception("a user message with an empty content list has no place in the conversation") -}}
  {%- endif -%}
  {%- if answer_id is string -%}
    {%- set blocks = [{"type": "tool_result", "tool_use_id": answer_id, "content": content or ""}] -%}
    {%- set role = "user" -%}
  {%- endif -%}
  {%- if role == "tool" -%}
    {{- result(content if content is not none else "", false) -}}
    {%- set state.in_text = false -%}
  {%- elif role == "user" -%}
    {%- set state.in_text = false -%}
    {%- for block in blocks -%}
      {%- if block["type"] == "text" -%}
        {{- ("" if state.in_text else "<|user|>") ~ text(block["text"]) -}}
        {%- set state.in_text = true -%}
      {%- elif block["type"] == "tool_result" -%}
        {%- set answered = block["tool_use_id"] -%}
        {%- if answered in state.answered -%}
          {{- raise_exception("tool_use " ~ answered|tojson ~ " already has its tool_result; send one per call") -}}
        {%- elif answered not in state.pending -%}
          {{- raise_exception("tool_result " ~ answered|tojson ~ " matches no earlier tool_use") -}}
        {%- endif -%}
        {%- set state.pending = state.pending|reject("equalto", answered)|list -%}
        {%- set state.answered = state.answered + [answered] -%}
        {{- result(block.get("content", ""), block.get("is_error", false)) -}}
        {%- set state.in_text = false -%}
      {%- else -%}
        {{- raise_exception("a user message may hold text and tool_result blocks, not " ~ block["type"]|tojson) -}}
      {%- endif -%}
    {%- endfor -%}
  {%- elif role == "assistant" -%}
    {%- set close = not (loop.last and add_generation_prompt) -%}
    {%- set calls = message.get("tool_calls") or [] -%}
    {%- if blocks and calls and blocks[0]["type"] == "text" and blocks|length == 1 and not blocks[0]["text"] -%}
      {%- set blocks = [] -%}
    {%- endif -%}
    {%- if calls|length > 1 -%}
      {{- raise_exception("one tool call per assistant turn: generation stops at <|end_tool_call|>") -}}
    {%- endif -%}
    {%- if state.pending -%}
      {{- raise_exception("tool_use " ~ state.pending[0]|tojson ~ " has no tool_result before the next assistant turn") -}}
    {%- endif -%}
    {{- "<|assistant|>" -}}
    {%- for block in blocks -%}
      {%- if block["type"] == "text" -%}
        {{- text(block["text"]) -}}
      {%- elif block["type"] == "thinking" -%}
        {{- "<|thinking|>" ~ text(block["thinking"]) ~ "<|end_thinking|>" -}}
      {%- elif block["type"] in ("tool_use", "server_tool_use") -%}
        {%- if block["type"] == "tool_use" and (not loop.last or calls) -%}
          {{- raise_exception("a tool_use block must be the last block of its assistant message") -}}
        {%- endif -%}
        {%- if block["type"] == "server_tool_use" and (loop.nextitem is not defined
              or loop.nextitem["type"] != "server_tool_result" or loop.nextitem["tool_use_id"] != block["id"]) -%}
          {{- raise_exception("a server_tool_use is followed at once by the server_tool_result that answers it") -}}
        {%- endif -%}
        {%- if block["type"] == "tool_use" -%}
          {%- set state.pending = state.pending + [block["id"]] if block["id"] is string and block["id"] not in
                state.pending + state.answered else raise_exception("each tool_use needs its own string id") -%}
        {%- endif -%}
        {{- tool_call(block.get("name"), block.get("input")) -}}
      {%- elif block["type"] == "server_tool_result" -%}
        {%- if loop.previtem is not defined or loop.previtem["type"] != "server_tool_use" -%}
          {{- raise_exception("a server_tool_result follows the server_tool_use it answers") -}}
        {%- endif -%}
        {{- result(block.get("content", ""), block.get("is_error", false)) ~ "<|assistant|>" -}}
      {%- else -%}
        {{- raise_exception("an assistant message may not hold a block of type " ~ block["type"]|tojson) -}}
      {%- endif -%}
    {%- endfor -%}
    {%- for call in calls -%}
      {%- set function = call["function"] if call["function"] is defined else call -%}
      {%- if call.get("id") is string -%}
        {%- set state.pending = state.pending + [call["id"]] if call["id"] not in state.pending + state.answered
              else raise_exception("each tool call needs its own id") -%}
      {%- endif -%}
      {{- tool_call(function.get("name"), function.get("arguments")) -}}
    {%- endfor -%}
    {%- set ends_in_call = calls or (blocks and blocks[-1]["type"] == "tool_use") -%}
    {%- if not ends_in_call and close -%}
      {{- "<|end_turn|>" -}}
    {%- elif ends_in_call and not close -%}
      {{- raise_exception("the last message ends with a tool call; add its result before asking for a reply") -}}
    {%- endif -%}
  {%- else -%}
    {{- raise_exception("role " ~ role|tojson ~ " is not one of system (first), user, assistant, tool") -}}
  {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt and (not conversation or conversation[-1]["role"] in ("user", "tool")) -%}
  {%- if state.pending -%}
    {{- raise_exception("tool_use " ~ state.pending[0]|tojson ~ " has no tool_result before the next assistant turn") -}}
  {%- endif -%}
  {{- "<|assistant|>" -}}
{%- endif -%}
"""


def jinja_chat_template(special_tokens: dict[str, int] | list[str]) -> str:
    """The Jinja chat template for a tokenizer with these special tokens (it must have the chat markers).

    The template refuses text that contains any of the special tokens (see the module docstring)."""
    missing = [marker for marker in CHAT_MARKERS if marker not in special_tokens]
    if missing:
        raise ValueError(f"the tokenizer has no chat markers {missing}; only a tokenizer with the course's control "
                         "tokens (llmkit.tokens.tokenizer.COURSE_SPECIAL_TOKENS) has a chat template")
    return _TEMPLATE.replace("__SPECIAL_TOKENS__", json.dumps(sorted(special_tokens))).strip() + "\n"
