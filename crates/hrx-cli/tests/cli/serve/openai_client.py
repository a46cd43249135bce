"""The official openai client against `hrx serve`.

Usage: openai_client.py BASE_URL MODEL API_KEY < {"texts": [...], "ids": [[...], ...]}
Prints one JSON object with what each call returned.
"""

import base64
import json
import struct
import sys

import openai
from openai import OpenAI

base, model, key = sys.argv[1:4]
request = json.load(sys.stdin)
texts, ids = request["texts"], request["ids"]
client = OpenAI(base_url=base + "/v1", api_key=key, max_retries=0, timeout=120)
out = {"version": openai.__version__}

# Without encoding_format the client asks for base64 and decodes it.
r = client.embeddings.create(model=model, input=texts)
out["default"] = [d.embedding for d in r.data]
out["object"], out["model"] = r.object, r.model
out["usage"] = [r.usage.prompt_tokens, r.usage.total_tokens]
out["indices"] = [d.index for d in r.data]

r = client.embeddings.create(model=model, input=texts, encoding_format="float")
out["float"] = [d.embedding for d in r.data]

r = client.embeddings.create(model=model, input=texts, encoding_format="base64", user="ignored")
out["base64"] = []
for d in r.data:
    raw = base64.b64decode(d.embedding)
    out["base64"].append(list(struct.unpack("<%df" % (len(raw) // 4), raw)))

r = client.embeddings.create(model=model, input=texts[0], encoding_format="float")
out["single"] = r.data[0].embedding

r = client.embeddings.create(model=model, input=ids, encoding_format="float")
out["ids"] = [d.embedding for d in r.data]
out["ids_usage"] = r.usage.prompt_tokens

out["models"] = [m.id for m in client.models.list().data]

errors = {}
try:
    OpenAI(base_url=base + "/v1", api_key="wrong", max_retries=0).embeddings.create(model=model, input="x")
except openai.AuthenticationError as e:
    errors["wrong_key"] = [e.status_code, e.code]
try:
    client.embeddings.create(model="no-such-model", input="x")
except openai.NotFoundError as e:
    errors["unknown_model"] = [e.status_code, e.code]
try:
    client.embeddings.create(model=model, input="")
except openai.BadRequestError as e:
    errors["empty"] = [e.status_code, e.param]
try:
    client.embeddings.create(model=model, input="x", dimensions=8)
except openai.BadRequestError as e:
    errors["dimensions"] = [e.status_code, e.param]
out["errors"] = errors

print(json.dumps(out))
