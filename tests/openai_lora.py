#!/usr/bin/env python3
"""LoRA adapters through `pagoda serve --enable-lora`, read by the official `openai` package.

Usage: tests/openai_lora.py PAGODA_BINARY. Serves the tiny Llama family model
($PAGODA_FAMILIES_DIR/llama) with two of the adapters scripts/tiny-adapters.py writes beside
it (one as NAME=PATH, one in vLLM's JSON form): /v1/models lists them with the base as
parent; each adapter's greedy reply differs from the other's and the base's, and equals its
run alone when the three run together; prometheus_client parses vllm:lora_requests_info
naming both adapters while requests of both run; an adapter loaded at runtime serves and
unloads, an unknown model is openai's NotFoundError.
"""

import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
from prometheus_client.parser import text_string_to_metric_families

from openai_client import pagoda_server

KEY = "unused"
PROMPT = "The capital of France is"


def greedy(client, model: str, max_tokens: int = 8) -> str:
    reply = client.completions.create(
        model=model, prompt=PROMPT, temperature=0, max_tokens=max_tokens, extra_body={"ignore_eos": True}
    )
    assert reply.model == model, reply.model
    return reply.choices[0].text


def lora_info(base: str) -> tuple:
    """(labels, value) of the one vllm:lora_requests_info sample."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        if family.name == "vllm:lora_requests_info":
            assert family.type == "gauge"
            (sample,) = family.samples
            return sample.labels, sample.value
    raise AssertionError("no vllm:lora_requests_info")


def post(base: str, path: str, body: dict, key: str | None = KEY) -> tuple:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(f"{base}{path}", data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def main() -> None:
    llama = os.path.join(os.environ["PAGODA_FAMILIES_DIR"], "llama")
    lora = os.path.join(llama, "lora")
    flags = (
        "--enable-lora",
        "--lora-modules",
        f"sql={lora}/sql",
        "--lora-modules",
        json.dumps({"name": "chat", "path": f"{lora}/chat"}),
        "--max-loras",
        "2",
        "--max-lora-rank",
        "8",
        "--metrics-prefix",
        "vllm",
        "--api-key",
        KEY,
    )
    with pagoda_server([sys.argv[0], sys.argv[1], llama], flags=flags) as client:
        base = str(client.base_url).rstrip("/").removesuffix("/v1")
        cards = [(m.id, getattr(m, "parent", None)) for m in client.models.list().data]
        assert cards == [("smollm2", None), ("chat", "smollm2"), ("sql", "smollm2")], cards

        models = ["sql", "chat", "smollm2"]
        alone = {model: greedy(client, model) for model in models}
        assert len(set(alone.values())) == 3, f"adapters do not change the reply: {alone}"
        together, threads = {}, []
        for model in models * 2:
            thread = threading.Thread(target=lambda m=model: together.setdefault(m, []).append(greedy(client, m)))
            threads.append(thread)
            thread.start()
        for thread in threads:
            thread.join()
        for model in models:
            assert together[model] == [alone[model]] * 2, (model, together[model], alone[model])

        # Requests of two adapters at once: the gauge names both (the value is the time).
        labels, _ = lora_info(base)
        assert labels == {"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}, labels
        long = [threading.Thread(target=greedy, args=(client, m, 160)) for m in ("sql", "chat")]
        for thread in long:
            thread.start()
        deadline, seen = time.time() + 60, None
        while time.time() < deadline:
            labels, value = lora_info(base)
            adapters = set(filter(None, labels["running_lora_adapters"].split(",")))
            adapters |= set(filter(None, labels["waiting_lora_adapters"].split(",")))
            if adapters == {"chat", "sql"}:
                seen = labels
                assert abs(value - time.time()) < 60, value
                break
            time.sleep(0.02)
        for thread in long:
            thread.join()
        assert seen is not None, "vllm:lora_requests_info never named both adapters"
        assert seen["max_lora"] == "2", seen

        # Runtime loading behind the key; an unknown model is a 404.
        body = {"lora_name": "math", "lora_path": f"{lora}/math"}
        assert post(base, "/v1/load_lora_adapter", body, key=None)[0] == 401
        assert post(base, "/v1/load_lora_adapter", body) == (200, "Success: LoRA adapter 'math' added successfully.")
        assert post(base, "/v1/load_lora_adapter", body)[0] == 400
        assert greedy(client, "math") not in alone.values()
        assert post(base, "/v1/unload_lora_adapter", {"lora_name": "math"})[0] == 200
        try:
            greedy(client, "math")
            raise AssertionError("an unloaded adapter still served")
        except openai.NotFoundError:
            pass
    print("openai_lora: ok", flush=True)


if __name__ == "__main__":
    main()
