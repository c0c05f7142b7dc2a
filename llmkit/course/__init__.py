"""What only the course needs; the engine below never imports it.

    conversations, conversation_data   seeded synthetic dialogues (make_conversations, weather_conversation)
                                       and their values, splits and the Conversation type
    preferences, strawberry            DPO pairs (make_preferences); the strawberry experiment's tasks
    skills, skill_preferences, ...     the skill data of the recipe (skill_conversation: the type and splits;
                                       phrasing, open_framing, open_talk, open_forms, own_tools, toolgen,
                                       values, entities)
    tools, calculator, search          the example tools (get_weather, count_letters, calculator, web_search)
    react                              the legacy ReAct text protocol and why parsing it fails
    evals, call_failures               held-out scores through the one harness loop; how often calls fail
    profiling                          timing experiments (prefill vs decode, caching, replayed turns)
    recipe, recipe_stages              rebuilding the shipped models end to end (``llmkit recipe``)
    spelling, strawberry, field_order, the source notes' experiments (data/experiments/<name>/build.py):
    fact_frequency                     spell then count; evidence before conclusion; facts by how often seen
"""
