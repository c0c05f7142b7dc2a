"""The loop: how a model that predicts one next token writes a whole answer.

    prefill   read the whole prompt in one forward pass: every position in parallel, cheap per token
    decode    choose a token (llmkit.generation.sampling), append it, run the model on it; one pass per token
    stop      a stop token ("end_turn"), a tool-call end ("tool_use"), a stop sequence in the text
              ("stop_sequence"), the token budget ("max_tokens"), or a full context ("context_window")

The KV cache (llmkit.model.kvcache) keeps every earlier token's keys and values, so a decode step only
computes the new token's; ``use_cache=False`` recomputes the whole sequence at every step, for
comparison. ``PrefixCache`` (llmkit.generation.prefix_cache) carries the same idea across requests
(prompt caching): a request that starts with tokens seen before copies their keys and values
instead of recomputing them.

Which code runs the model is decided once per request, when it starts: the fast decode path
(``llmkit.model.fast``, the same logits bit for bit, less per-step overhead) unless the model is in
training mode, has a forward hook, or has an explicit or swapped-in layer; then the modules of
``llmkit.model.transformer`` run, so hooks see every step. The loop itself always runs in eval
mode (no dropout) and gives every module its own mode back at the end.

Requests keep their state to themselves (KV cache, fast path, samples), so several threads may
generate from one eval-mode model at once and share one ``PrefixCache``, which locks its own trie.

Two options rule tokens out before each draw (``llmkit.generation.sampling.mask_tokens``): ``suppress_tokens``
never lets some ids be drawn (the client bans the thinking markers this way), and ``constraint``
asks a ``TokenConstraint`` at every step which tokens may come next (``llmkit.chat.constrained`` keeps
a tool call valid JSON for its schema). Neither costs anything when it is not used.

``generate`` returns a finished ``Generation``; ``stream`` yields each token as it is made (the
types are in ``llmkit.generation.results``). Every argument is checked up front, in
``llmkit.generation.request``; ``llmkit.generation.text_stream`` turns tokens into final text.
"""
from __future__ import annotations

import time
from typing import Callable, Collection, Iterable, Iterator, Sequence

import torch

from llmkit.generation.choice import choose_option, option_log_probs, repeat_row
from llmkit.generation.prefix_cache import PrefixCache
from llmkit.generation.request import Request, check_prompt, check_request
from llmkit.generation.results import Completion, Generation, StopEvent, TokenEvent, Usage
from llmkit.generation.sampling import SamplingParams, TokenConstraint, make_generator, mask_tokens, sample_batch
from llmkit.generation.text_stream import TextStream
from llmkit.model.fast import FastModel, fast_path
from llmkit.model.kvcache import KVCache
from llmkit.model.transformer import Transformer

# --- the public entry points -------------------------------------------------------------------------

def generate(model: Transformer, prompt_ids: Sequence[int] | torch.Tensor, *, max_new_tokens: int,
             sampling: SamplingParams | None = None, stop_tokens: Iterable[int] = (),
             tool_stop_tokens: Iterable[int] = (), stop_sequences: Iterable[str] = (), tokenizer=None,
             seed: int | None = None, use_cache: bool = True, prefix_cache: PrefixCache | None = None,
             num_samples: int = 1, keep_logits: bool = False, suppress_tokens: Collection[int] = (),
             constraint: Callable[[], TokenConstraint] | None = None) -> Generation:
    """Continue ``prompt_ids`` until a stop reason; see ``stream`` for every argument."""
    for event in stream(model, prompt_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                        stop_tokens=stop_tokens, tool_stop_tokens=tool_stop_tokens,
                        stop_sequences=stop_sequences, tokenizer=tokenizer, seed=seed, use_cache=use_cache,
                        prefix_cache=prefix_cache, num_samples=num_samples, keep_logits=keep_logits,
                        suppress_tokens=suppress_tokens, constraint=constraint):
        pass
    return event.generation


def stream(model: Transformer, prompt_ids: Sequence[int] | torch.Tensor, *, max_new_tokens: int,
           sampling: SamplingParams | None = None, stop_tokens: Iterable[int] = (),
           tool_stop_tokens: Iterable[int] = (), stop_sequences: Iterable[str] = (), tokenizer=None,
           seed: int | None = None, use_cache: bool = True, prefix_cache: PrefixCache | None = None,
           num_samples: int = 1, keep_logits: bool = False, suppress_tokens: Collection[int] = (),
           constraint: Callable[[], TokenConstraint] | None = None) -> Iterator[TokenEvent | StopEvent]:
    """Yield a ``TokenEvent`` per new token as it is made, then one ``StopEvent``.

    prompt_ids: one prompt (a list of ids, a 1-D tensor or a (1, T) tensor).
    max_new_tokens: the most tokens to generate per sample ("max_tokens").
    sampling: a ``SamplingParams``; None means greedy (temperature 0).
    stop_tokens: ids that end the turn ("end_turn"); tool_stop_tokens: ids that end a tool call
        ("tool_use"). Either way the id is the last of ``tokens`` and is left out of ``text``.
    stop_sequences: strings that end generation when they appear in the decoded text, even across
        token boundaries ("stop_sequence"); they need ``tokenizer``.
    tokenizer: decodes the new tokens into ``text``.
    seed: makes sampling reproducible (None: fresh randomness). Greedy ignores it.
    use_cache: False recomputes the whole sequence every step (same tokens, much slower).
    prefix_cache: a ``PrefixCache`` shared across calls; it never changes the result, only the cost.
    num_samples: continuations drawn from one shared prefill (``Generation.samples``).
    keep_logits: keep each step's raw logits in ``Completion.logits`` (the model's own scores, before
        ``suppress_tokens`` and ``constraint`` rule any out).
    suppress_tokens: ids that are never drawn (their logits become -inf before sampling).
    constraint: a function returning a fresh ``llmkit.generation.sampling.TokenConstraint``, called once per
        sample (each continuation keeps its own state), e.g.
        ``functools.partial(ToolCallConstraint, tokenizer, tools)``; the tokens it does not allow
        are never drawn.

    The arguments are checked now, so a mistake raises here rather than at the first ``next()``.
    """
    request = check_request(model, prompt_ids, max_new_tokens=max_new_tokens, sampling=sampling,
                             stop_tokens=stop_tokens, tool_stop_tokens=tool_stop_tokens,
                             stop_sequences=stop_sequences, tokenizer=tokenizer, seed=seed, use_cache=use_cache,
                             prefix_cache=prefix_cache, num_samples=num_samples, keep_logits=keep_logits,
                             suppress_tokens=suppress_tokens, constraint=constraint)
    return _Loop(model, request).run()


def next_token_logits(model: Transformer, prompt_ids: Sequence[int] | torch.Tensor) -> torch.Tensor:
    """The model's scores for the token after ``prompt_ids``: one forward pass, shape (vocab,).

    Pair it with ``llmkit.generation.sampling.stage_probabilities`` to see what each sampling stage does."""
    prompt = check_prompt(model, prompt_ids)
    with torch.inference_mode():
        ids = torch.tensor([prompt], device=model.device)
        logits = model(ids, last_only=True)[0, -1]
    return logits.clone()  # an ordinary tensor, usable outside inference mode


class _Sample:
    """One continuation's tokens, text and stop reason while the loop runs."""

    def __init__(self, index: int, text: TextStream | None):
        self.index = index
        self.tokens: list[int] = []
        self.text = text
        self.stop_reason: str | None = None
        self.constraint: TokenConstraint | None = None

    def add(self, token: int, loop: _Loop, last_step: bool, elapsed: float) -> TokenEvent:
        self.tokens.append(token)
        if self.constraint is not None:
            self.constraint.advance(token)
        delta = None
        if token in loop.tool_use:
            self.stop_reason = "tool_use"
        elif token in loop.end_turn:
            self.stop_reason = "end_turn"
        else:
            if self.text is not None:
                delta = self.text.add(token)
                if self.text.matched is not None:
                    self.stop_reason = "stop_sequence"
            if self.stop_reason is None and last_step:
                self.stop_reason = "max_tokens" if len(self.tokens) == loop.max_new_tokens else "context_window"
        if self.stop_reason is not None and self.text is not None:
            delta = (delta or "") + self.text.finish()
        return TokenEvent(token, delta, self.index, elapsed)

    def completion(self, logits: torch.Tensor | None) -> Completion:
        if self.text is None:
            return Completion(self.tokens, None, self.stop_reason, None, logits)
        return Completion(self.tokens, self.text.text, self.stop_reason, self.text.matched, logits)


class _Stopwatch:
    """Seconds of our own work: time spent waiting for a stream's reader does not count."""

    def __init__(self):
        self._start, self._paused, self._paused_at = time.perf_counter(), 0.0, None

    def pause(self) -> None:
        self._paused_at = time.perf_counter()

    def resume(self) -> None:
        self._paused += time.perf_counter() - self._paused_at

    def elapsed(self) -> float:
        return time.perf_counter() - self._start - self._paused


# --- the loop ----------------------------------------------------------------------------------------

class _Loop:
    """Prefill once, then sample -> append -> decode until every sample has a stop reason."""

    def __init__(self, model: Transformer, request: Request):
        self.model, self.prompt, self.max_new_tokens = model, request.prompt, request.max_new_tokens
        self.params, self.end_turn, self.tool_use = request.params, request.end_turn, request.tool_use
        self.use_cache, self.prefix_cache = request.use_cache, request.prefix_cache
        self.n, self.keep_logits = request.num_samples, request.keep_logits
        self.steps = min(self.max_new_tokens, model.config.context_length - len(self.prompt))  # the most we can take
        self.generator = None if self.params.greedy else make_generator(request.seed, model.device)
        tokenizer = request.tokenizer
        self.samples = [_Sample(i, TextStream(tokenizer, request.stops) if tokenizer is not None else None)
                        for i in range(self.n)]
        self.suppressed: torch.Tensor | None = None  # (vocab,) True where a token is never drawn, on the CPU
        self.suppressed_here: torch.Tensor | None = None  # the same on the model's device
        if request.suppressed:
            self.suppressed = torch.zeros(model.config.vocab_size, dtype=torch.bool)
            self.suppressed[sorted(request.suppressed)] = True
            self.suppressed_here = self.suppressed.to(model.device)
        self.constrained = request.constraints is not None
        for sample, constraint in zip(self.samples, request.constraints or ()):
            sample.constraint = constraint
        # the fast decode path, or the modules themselves: chosen once, here (llmkit.model.fast)
        self.runner: Transformer | FastModel = model
        if self.use_cache:
            self.runner = fast_path(model) or model

    def run(self) -> Iterator[TokenEvent | StopEvent]:
        model, n, p = self.model, self.n, len(self.prompt)
        clock = _Stopwatch()
        # dropout off while generating, and each module's own mode back at the end (only the
        # modules in training mode are touched: a model already in eval mode costs nothing)
        training = [module for module in model.modules() if module.training]
        for module in training:
            module.training = False
        try:
            penalise = self.params.repetition_penalty != 1.0
            keep_sequence = penalise or not self.use_cache  # else the cache holds everything the model needs
            with torch.inference_mode():
                sequence = None
                if keep_sequence:  # prompt + every sample's new tokens: what a cache-free step
                    # re-reads, and what the repetition penalty looks at
                    sequence = torch.empty((n, p + self.steps), dtype=torch.long, device=model.device)
                    sequence[:, :p] = torch.tensor(self.prompt, device=model.device)
                cache, cache_read, logits = self._prefill(sequence)
            kept_logits, first_token_at = [], None
            for step in range(self.steps):
                with torch.inference_mode():
                    if self.keep_logits:
                        kept_logits.append(logits.float())
                    if self.constrained:
                        self._make_choices(logits, cache, sequence, p + step)
                    if self.suppressed is not None or self.constrained:  # nothing to do in the plain case
                        logits = self._rule_out(logits)
                    chosen = sample_batch(logits, self.params, generator=self.generator,
                                          previous_tokens=sequence[:, :p + step] if penalise else None)
                    if keep_sequence:
                        sequence[:, p + step] = chosen
                now = clock.elapsed()
                if first_token_at is None:
                    first_token_at = now
                last_step = step == self.steps - 1
                events = [sample.add(token, self, last_step, now)
                          for sample, token in zip(self.samples, chosen.tolist()) if sample.stop_reason is None]
                clock.pause()
                yield from events
                clock.resume()
                if all(sample.stop_reason is not None for sample in self.samples):
                    break
                with torch.inference_mode():  # one forward pass for the token(s) just chosen
                    if cache is not None:
                        logits = self.runner.step(chosen, cache)
                    else:
                        logits = model(sequence[:, :p + step + 1], last_only=True)[:, -1]
            finished_at = clock.elapsed()
            if self.prefix_cache is not None:
                first = self.prompt + self.samples[0].tokens
                self.prefix_cache.store(model, first[:cache.length], cache)
        finally:
            for module in training:
                module.training = True
        yield StopEvent(self._result(kept_logits, cache_read, first_token_at, finished_at))

    def _make_choices(self, logits: torch.Tensor, cache: KVCache | None, sequence: torch.Tensor | None,
                      length: int) -> None:
        """Where a sample's constraint offers whole options (``llmkit.generation.choice``), score each
        by the model's probability of all its tokens and tell the constraint which one won.
        ``length`` tokens (prompt and new) precede this step."""
        for row, sample in enumerate(self.samples):
            offer = getattr(sample.constraint, "choices", None)
            options = offer() if offer is not None and sample.stop_reason is None else None
            if not options:
                continue
            if max(len(option) for option in options) > self.steps - (length - len(self.prompt)):
                continue  # an option would not fit in the budget: token by token instead
            scores = option_log_probs(logits[row], options,
                                      lambda fed: self._continue_row(row, fed, cache, sequence, length))
            choose_option(sample.constraint, options, scores, self.params, self.generator, self.suppressed)

    def _continue_row(self, row: int, fed: torch.Tensor, cache: KVCache | None, sequence: torch.Tensor | None,
                      length: int) -> torch.Tensor:
        """Logits at every position of ``fed`` (options, k) read after sample ``row``'s ``length``
        tokens, on a copy of its cache: the sample's own cache is left as it was."""
        if cache is None:
            context = sequence[row:row + 1, :length].expand(fed.size(0), -1)
            return self.model(torch.cat([context, fed], dim=1))[:, length:]
        return self.runner(fed, cache=repeat_row(self.model, cache, row, fed.size(0), length + fed.size(1)))

    def _rule_out(self, logits: torch.Tensor) -> torch.Tensor:
        """The logits with suppressed tokens, and tokens a sample's constraint forbids, at -inf."""
        masks = [sample.constraint.allowed() if self.constrained and sample.stop_reason is None else None
                 for sample in self.samples]
        if all(mask is None for mask in masks):
            return logits if self.suppressed is None else logits.masked_fill(self.suppressed_here, float("-inf"))
        vocab = logits.size(-1)
        for mask in masks:
            if mask is not None and (mask.shape != (vocab,) or mask.dtype != torch.bool):
                raise ValueError(f"a constraint's allowed() must return None or a bool tensor of shape ({vocab},), "
                                 f"got {mask.dtype} of shape {tuple(mask.shape)}")
        everything = torch.ones(vocab, dtype=torch.bool)
        allowed = torch.stack([everything if mask is None else mask.cpu() for mask in masks])
        if self.suppressed is not None:
            allowed &= ~self.suppressed
        stuck = [i for i, row in enumerate(allowed.any(-1).tolist()) if not row]
        if stuck:
            raise RuntimeError(f"sample {stuck[0]} has no token left to draw: its constraint allows only tokens "
                               "that suppress_tokens bans; remove those ids from suppress_tokens")
        return mask_tokens(logits, allowed.to(logits.device))

    def _prefill(self, sequence: torch.Tensor | None) -> tuple[KVCache | None, int, torch.Tensor]:
        """Read the prompt (the part the prefix cache does not hold); return the cache (copied into
        n rows, one per sample), the tokens served from the prefix cache, and the next-token logits.
        ``sequence`` holds the prompt when the loop keeps one (always without a cache)."""
        model, cache_read, p = self.model, 0, len(self.prompt)
        if not self.use_cache:
            return None, 0, model(sequence[:1, :p], last_only=True)[:, -1].expand(self.n, -1)
        cache = model.new_cache(1, max_length=p + self.steps - 1)  # the last token is never fed back
        if self.prefix_cache is not None:
            cache_read = self.prefix_cache.load(model, self.prompt, cache)
        # only the tokens the prefix cache did not serve become a tensor (a long list is slow to convert)
        unread = torch.tensor([self.prompt[cache_read:]], device=model.device)
        logits = self.runner(unread, cache=cache, last_only=True)[:, -1]
        if self.n > 1:
            cache = _repeat_rows(model, cache, self.n)
        return cache, cache_read, logits.expand(self.n, -1)

    def _result(self, kept_logits, cache_read, first_token_at, finished_at) -> Generation:
        samples = []
        for row, sample in enumerate(self.samples):
            logits = None
            if self.keep_logits:  # stacked outside inference mode: an ordinary tensor for the caller
                logits = torch.stack([step[row] for step in kept_logits[:len(sample.tokens)]])
            samples.append(sample.completion(logits))
        output_tokens = sum(len(s.tokens) for s in samples)
        decode_time, decode_tokens = finished_at - first_token_at, output_tokens - self.n
        decode_speed = decode_tokens / decode_time if decode_tokens > 0 and decode_time > 0 else None
        usage = Usage(input_tokens=len(self.prompt) - cache_read, output_tokens=output_tokens,
                      cache_read_input_tokens=cache_read, time_to_first_token=first_token_at,
                      decode_tokens_per_s=decode_speed)
        return Generation(samples, usage)


def _repeat_rows(model: Transformer, cache: KVCache, n: int) -> KVCache:
    """A cache with n rows, each a copy of the one-row ``cache``: n samples share one prefill."""
    return repeat_row(model, cache, 0, n)
