#!/usr/bin/env python3
"""Reasoning output through the official `openai` package against `pagoda serve
--reasoning-parser qwen3`.

Usage: tests/openai_reasoning.py PAGODA_BINARY [MODEL]. The default model never closes a
thinking block, so under the qwen3 parser its whole reply is reasoning: the client reads it
from `message.reasoning_content` (and `reasoning`), streamed deltas add up to it, and `content`
is absent. With `chat_template_kwargs={"enable_thinking": False}` the same greedy reply is all
`content`. `reasoning_effort` is taken (low, medium, high) or refused with a 400. The split
itself, `</think>` and harmony included, is checked by tests/server_reasoning.rs on a
scripted model.
"""

import sys

import openai

from openai_client import pagoda_server


def main() -> None:
    with pagoda_server(sys.argv, flags=("--reasoning-parser", "qwen3")) as client:
        messages = [{"role": "user", "content": "What is the capital of France?"}]
        ask = dict(model="smollm2", messages=messages, temperature=0, max_tokens=12)

        thought = client.chat.completions.create(**ask).choices[0].message
        reasoning = thought.reasoning_content
        assert isinstance(reasoning, str) and reasoning, thought
        assert thought.model_extra["reasoning"] == reasoning, thought
        assert thought.content is None, thought

        pieces, content = [], []
        for chunk in client.chat.completions.create(**ask, stream=True):
            for choice in chunk.choices:
                extra = choice.delta.model_extra or {}
                pieces.append(extra.get("reasoning_content") or "")
                assert extra.get("reasoning") == extra.get("reasoning_content"), choice.delta
                content.append(choice.delta.content or "")
        assert "".join(pieces) == reasoning, f"streamed {''.join(pieces)!r} != {reasoning!r}"
        assert "".join(content) == "", content

        answered = client.chat.completions.create(
            **ask, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
        ).choices[0].message
        assert answered.content == reasoning, (answered.content, reasoning)
        assert getattr(answered, "reasoning_content", None) is None, answered

        low = client.chat.completions.create(**ask, reasoning_effort="low").choices[0].message
        assert low.reasoning_content == reasoning, low
        try:
            client.chat.completions.create(**ask, extra_body={"reasoning_effort": "extreme"})
            raise AssertionError("reasoning_effort extreme was accepted")
        except openai.BadRequestError as error:
            assert "reasoning_effort" in str(error)
        print(f"openai reasoning test passed: reasoning_content {reasoning!r}")


if __name__ == "__main__":
    main()
