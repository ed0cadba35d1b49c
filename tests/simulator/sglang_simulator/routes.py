"""The generation routes (``/generate``, ``/v1/completions``, ``/v1/chat/completions``), as SGLang's http_server.py
and entrypoints/openai shape them: parsing a body into prompt token counts (len(input_ids), or len(text) // 4,
at least 1) and max_new_tokens, the 400 refusals (RequestError), and the replies and stream chunks (the warmup's
answer " Paris. It is the capital of France", repeated for longer generations)."""

import time

# The warmup's answer (" Paris. It is the capital of France"), repeated for longer generations.
OUTPUT_VOCAB = [(12095, " Paris"), (13, "."), (1084, " It"), (374, " is"), (279, " the"), (6722, " capital"),
                (315, " of"), (9625, " France")]
OUTPUT_CYCLE = "".join(text for _id, text in OUTPUT_VOCAB)
DEFAULT_MAX_NEW_TOKENS = 128  # SamplingParams default; also used where SGLang would run until EOS


def estimate_tokens(text):
    return max(1, len(text) // 4)


def output_ids(count):
    return [OUTPUT_VOCAB[i % len(OUTPUT_VOCAB)][0] for i in range(count)]


def output_text(count):
    cycles, rest = divmod(count, len(OUTPUT_VOCAB))
    return OUTPUT_CYCLE * cycles + "".join(text for _id, text in OUTPUT_VOCAB[:rest])


class RequestError(Exception):
    """A request refused with 400, in SGLang's words where it has them."""


def max_new_tokens(value, default=DEFAULT_MAX_NEW_TOKENS):
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"max_new_tokens must be an integer, got {value!r}.")
    if value < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {value}.")
    return value


def is_token_ids(value):
    return isinstance(value, list) and bool(value) and all(isinstance(i, int) for i in value)


def prompt_tokens(prompt):
    """Token counts of a prompt: a text, token ids, or a list of either (a batch)."""
    if isinstance(prompt, str):
        return [estimate_tokens(prompt)]
    if is_token_ids(prompt):
        return [len(prompt)]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or is_token_ids(p) for p in prompt):
        return [count for p in prompt for count in prompt_tokens(p)]
    raise RequestError(f"The prompt must be a text, token ids or a list of either, not {prompt!r:.100}.")


def parse_generate(body):
    """(prompt token counts, max_new_tokens) of a /generate body."""
    prompt = body.get("text") if body.get("text") is not None else body.get("input_ids")
    if prompt is None:
        raise RequestError("Either text, input_ids or input_embeds should be provided.")
    params = body.get("sampling_params") or {}
    if isinstance(params, list):  # one per prompt in a batch: the simulator takes the first
        params = params[0] if params else {}
    return prompt_tokens(prompt), max_new_tokens(params.get("max_new_tokens"))


def parse_completion(body):
    return prompt_tokens(body.get("prompt")), max_new_tokens(body.get("max_tokens"), 16)


def parse_chat(body):
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError("messages must be a non-empty list of {'role': ..., 'content': ...} objects.")
    rendered = ""
    for message in messages:  # a ChatML-like template, then the generation prompt
        content = message.get("content") or ""
        if isinstance(content, list):
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        rendered += f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n"
    limit = body.get("max_completion_tokens")
    return [estimate_tokens(rendered + "<|im_start|>assistant\n")], \
        max_new_tokens(body.get("max_tokens") if limit is None else limit)


def generate_output(request, count, finished):
    meta = {"id": request.rid, "finish_reason": {"type": "length", "length": count} if finished else None,
            "prompt_tokens": request.prompt_tokens, "completion_tokens": count, "cached_tokens": 0,
            "weight_version": "default"}
    if finished:
        meta["e2e_latency"] = request.finished_at - request.arrival
    return {"text": output_text(count), "output_ids": output_ids(count), "meta_info": meta}


def usage_of(requests, completion=None):
    """OpenAI usage of finished requests, or of one request with ``completion`` tokens so far."""
    prompt = sum(request.prompt_tokens for request in requests)
    if completion is None:
        completion = sum(request.max_new_tokens for request in requests)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "reasoning_tokens": 0}


def completion_choice(index, text, finish_reason):
    return {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason, "matched_stop": None}


def chat_choice(index, text, finish_reason, delta=True):
    content = {"content": text} if delta else {
        "role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None}
    return {"index": index, "delta" if delta else "message": content, "logprobs": None,
            "finish_reason": finish_reason, "matched_stop": None}


GENERATION_ROUTES = {  # path: (parse, object of a reply, object of a stream chunk)
    "/generate": (parse_generate, None, None),
    "/v1/completions": (parse_completion, "text_completion", "text_completion"),
    "/v1/chat/completions": (parse_chat, "chat.completion", "chat.completion.chunk"),
}


def generation_reply(path, body, requests):
    """The JSON body of a finished (not streamed) generation."""
    if path == "/generate":
        outputs = [generate_output(request, request.max_new_tokens, True) for request in requests]
        text = body.get("text")
        batch = isinstance(text, list) if text is not None else not is_token_ids(body.get("input_ids"))
        return outputs if batch else outputs[0]
    head = openai_head(body, requests[0], GENERATION_ROUTES[path][1])
    if path == "/v1/completions":
        choices = [completion_choice(index, output_text(request.max_new_tokens), "length")
                   for index, request in enumerate(requests)]
    else:
        choices = [chat_choice(0, output_text(requests[0].max_new_tokens), "length", delta=False)]
    return dict(head, choices=choices, usage=usage_of(requests))


def stream_renderer(path, body, request):
    """render(sent, count, finished) -> the events of one chunk of a stream."""
    if path == "/generate":  # cumulative text and output_ids
        return lambda sent, count, finished: [generate_output(request, count, finished)]
    head = openai_head(body, request, GENERATION_ROUTES[path][2])
    options = body.get("stream_options") or {}
    include_usage, continuous_usage = bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))
    chat = path == "/v1/chat/completions"

    def render(sent, count, finished):
        """Text deltas (with the usage so far if continuous_usage_stats), the last with its finish_reason, then
        (if include_usage) the usage alone."""
        choice = chat_choice if chat else completion_choice
        events = [dict(head, choices=[choice(0, output_text(count)[len(output_text(sent)):],
                                             "length" if finished else None)],
                       usage=usage_of([request], count) if continuous_usage else None)]
        if chat and sent == 0:  # the first chunk announces the role
            events.insert(0, dict(head, choices=[dict(chat_choice(0, "", None),
                                                      delta={"role": "assistant", "content": ""})], usage=None))
        if finished and include_usage:
            events.append(dict(head, choices=[], usage=usage_of([request])))
        return events

    return render


def openai_head(body, request, object_name):
    return {"id": request.rid, "object": object_name, "created": int(time.time()),
            "model": body.get("model") or "default"}
