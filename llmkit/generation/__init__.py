"""Logits → text: sampling, the generate/stream loop with its stop reasons, and prompt (prefix) caching.

The public names, by module (imported from there: a package attribute ``generate`` would hide the
module ``llmkit.generation.generate`` behind the function of the same name):

    llmkit.generation.sampling      SamplingParams, GREEDY, sample, sample_batch, the logits filters
    llmkit.generation.generate      generate, stream, next_token_logits (the loop)
    llmkit.generation.results       Generation, Completion, Usage, TokenEvent, StopEvent, STOP_REASONS
    llmkit.generation.request       check_request, check_stop_sequences (every argument checked once)
    llmkit.generation.text_stream   TextStream (tokens in, final text out, stop sequences held back)
    llmkit.generation.prefix_cache  PrefixCache, PrefixCacheStats
    llmkit.generation.json_automaton  value_matcher, object_matcher, UnsupportedSchemaError: JSON read byte
                                    by byte against a schema (what constrained decoding asks at each step)
    llmkit.generation.choice        ChoiceConstraint, option_log_probs, pick_option: choosing among whole
                                    options (a tool's name) by the probability of all their tokens
"""
