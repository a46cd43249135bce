"""The official openai client against `hrx serve --llm`: completions and
chat completions, whole and streamed.

Usage: openai_generate.py BASE_URL MODEL API_KEY < {"prompt": "...", "messages": [...], "max_tokens": N}
Prints one JSON object with what each call returned.
"""

import json
import sys

import openai
from openai import OpenAI

base, model, key = sys.argv[1:4]
request = json.load(sys.stdin)
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=300)
n = request["max_tokens"]
out = {"version": openai.__version__}

r = client.completions.create(model=model, prompt=request["prompt"], max_tokens=n, temperature=0)
c = r.choices[0]
out["completion"] = {
    "object": r.object,
    "model": r.model,
    "text": c.text,
    "finish_reason": c.finish_reason,
    "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens],
}

pieces, reasons = [], []
for chunk in client.completions.create(
    model=model, prompt=request["prompt"], max_tokens=n, temperature=0, stream=True
):
    pieces.append(chunk.choices[0].text)
    reasons.append(chunk.choices[0].finish_reason)
out["completion_stream"] = {"text": "".join(pieces), "finish_reason": reasons[-1], "chunks": len(pieces)}

r = client.chat.completions.create(
    model=model, messages=request["messages"], max_tokens=n, temperature=0
)
c = r.choices[0]
out["chat"] = {
    "object": r.object,
    "role": c.message.role,
    "content": c.message.content,
    "finish_reason": c.finish_reason,
    "usage": [r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens],
}

pieces, usage = [], None
stream = client.chat.completions.create(
    model=model,
    messages=request["messages"],
    max_tokens=n,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
for chunk in stream:
    if chunk.usage is not None:
        usage = [chunk.usage.prompt_tokens, chunk.usage.completion_tokens]
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
out["chat_stream"] = {"content": "".join(pieces), "usage": usage}

# Sampling with a seed is repeatable.
seeded = [
    client.completions.create(
        model=model, prompt=request["prompt"], max_tokens=n, temperature=0.9, top_p=0.95, seed=5
    ).choices[0].text
    for _ in range(2)
]
out["seeded"] = seeded

errors = {}
try:
    client.completions.create(model="no-such-model", prompt="x", max_tokens=1)
except openai.NotFoundError as e:
    errors["unknown_model"] = [e.status_code, e.code]
try:
    client.completions.create(model=model, prompt="x", max_tokens=1_000_000)
except openai.BadRequestError as e:
    errors["too_long"] = [e.status_code, e.code]
try:
    client.completions.create(model=model, prompt="x", max_tokens=1, n=2)
except openai.BadRequestError as e:
    errors["n"] = [e.status_code, e.param]
try:
    OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "x"}]
    )
except openai.AuthenticationError as e:
    errors["wrong_key"] = [e.status_code, e.code]
out["errors"] = errors
print(json.dumps(out))
