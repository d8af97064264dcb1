#!/usr/bin/env python3
"""Structured outputs and tool calls through the official `openai` package against `pagoda serve`.

Usage: tests/openai_structured.py PAGODA_BINARY [MODEL]. On the default model:
- 20 JSON schemas, each sampled at temperature 0.7 with 10 seeds through `response_format`:
  every reply parses and validates under its schema (the `jsonschema` package);
- a regex, a choice list and a Lark grammar (vLLM's `structured_outputs` and `guided_*`
  fields), 10 seeds each: every reply matches;
- a tool call round trip (request -> tool_calls -> tool message -> final answer), streamed and
  not, with `tool_choice` "required" and a named function;
- 400s for a malformed schema, a bad regex and an unknown tool name in `tool_choice`.
"""

import json
import re
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

from openai_client import pagoda_server

SEEDS = range(10)
NAME = {"type": "string", "pattern": "^[A-Z][a-z]{1,9}$"}
SCHEMAS = [
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"], "additionalProperties": False},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}}, "required": ["color"],
     "additionalProperties": False},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                               "minItems": 1, "maxItems": 3}},
     "required": ["tags"], "additionalProperties": False},
    {"type": "object", "properties": {"ok": {"type": "boolean"}, "count": {"type": "integer", "minimum": 1,
                                                                          "maximum": 9}},
     "required": ["ok", "count"], "additionalProperties": False},
    {"type": "object", "properties": {"point": {"type": "object", "properties": {
        "x": {"type": "integer", "minimum": -50, "maximum": 50},
        "y": {"type": "integer", "minimum": -50, "maximum": 50}}, "required": ["x", "y"],
        "additionalProperties": False}}, "required": ["point"], "additionalProperties": False},
    {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}},
     "required": ["code"], "additionalProperties": False},
    {"type": "object", "properties": {"price": {"type": "number", "minimum": 0, "maximum": 1000},
                                      "currency": {"enum": ["EUR", "USD"]}},
     "required": ["price", "currency"], "additionalProperties": False},
    {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 2, "maxItems": 5},
    {"type": "object", "properties": {"name": NAME, "nickname": {"type": "string", "maxLength": 10}},
     "required": ["name"], "additionalProperties": False},
    {"type": "object", "properties": {"status": {"const": "done"}, "steps": {"type": "integer", "minimum": 1,
                                                                            "maximum": 5}},
     "required": ["status", "steps"], "additionalProperties": False},
    {"type": "object", "properties": {"user": {"type": "object", "properties": {
        "name": NAME, "roles": {"type": "array", "items": {"enum": ["admin", "dev", "ops"]}, "maxItems": 3}},
        "required": ["name", "roles"], "additionalProperties": False}}, "required": ["user"],
     "additionalProperties": False},
    {"type": "object", "properties": {"answer": {"enum": ["yes", "no", "maybe"]},
                                      "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
     "required": ["answer", "confidence"], "additionalProperties": False},
    {"type": "object", "properties": {"matrix": {"type": "array", "minItems": 2, "maxItems": 2, "items": {
        "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "integer", "minimum": 0, "maximum": 9}}}},
     "required": ["matrix"], "additionalProperties": False},
    {"type": "object", "properties": {"date": {"type": "string", "pattern": "^20[0-9]{2}-[01][0-9]-[0-3][0-9]$"}},
     "required": ["date"], "additionalProperties": False},
    {"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "minimum": 3,
                                                                              "maximum": 4},
                                      "name": NAME}, "required": ["kind", "legs", "name"],
     "additionalProperties": False},
    {"type": "object", "properties": {"items": {"type": "array", "maxItems": 3, "items": {
        "type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 999},
                                         "done": {"type": "boolean"}}, "required": ["id", "done"],
        "additionalProperties": False}}}, "required": ["items"], "additionalProperties": False},
    {"type": "object", "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5},
                                      "comment": {"type": "string", "maxLength": 20}},
     "required": ["rating"], "additionalProperties": False},
    {"type": "object", "properties": {"temperature": {"type": "number", "minimum": -40, "maximum": 50},
                                      "unit": {"enum": ["C", "F"]}}, "required": ["temperature", "unit"],
     "additionalProperties": False},
    {"type": "object", "properties": {"first": NAME, "last": NAME, "middle": NAME},
     "required": ["first", "last"], "additionalProperties": False},
    {"type": "object", "properties": {"level": {"type": "integer", "minimum": 1, "maximum": 3},
                                      "flags": {"type": "array", "items": {"type": "boolean"}, "minItems": 1,
                                                "maxItems": 4}},
     "required": ["level", "flags"], "additionalProperties": False},
]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20}},
                       "required": ["city"], "additionalProperties": False},
    },
}


def ask(client: openai.OpenAI, prompt: str, seed: int, **extra) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": prompt}], temperature=0.7, seed=seed,
        max_tokens=200, **extra)


def check_schemas(client: openai.OpenAI, pool: ThreadPoolExecutor) -> Iterator[str]:
    """Sends the schema requests at once; iterating the answer waits for and checks each."""
    def one(case):
        index, seed = case
        schema = SCHEMAS[index]
        fmt = {"type": "json_schema", "json_schema": {"name": f"s{index}", "schema": schema, "strict": True}}
        reply = ask(client, "Answer with JSON.", seed, response_format=fmt)
        text = reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop", f"schema {index} seed {seed}: {text!r} did not finish"
        jsonschema.validate(json.loads(text), schema)
        return text
    return pool.map(one, [(i, s) for i in range(len(SCHEMAS)) for s in SEEDS])


def arithmetic(text: str) -> bool:
    return re.fullmatch(r"[0-9+\-() ]+", text) is not None and isinstance(eval(text, {"__builtins__": {}}), int)


def check_regex_choice_grammar(client: openai.OpenAI, pool: ThreadPoolExecutor) -> Iterator[str]:
    """Sends the regex, choice and grammar requests at once; iterating waits and checks."""
    grammar = 'start: expr\nexpr: term (("+" | "-") term) ~ 0..3\nterm: NUMBER | "(" expr ")"\nNUMBER: /[0-9]{1,3}/\n'
    cases = [
        ({"structured_outputs": {"regex": r"[A-Z][a-z]{2,8} (is|was) [0-9]{1,2} years old\."}},
         lambda t: re.fullmatch(r"[A-Z][a-z]{2,8} (is|was) [0-9]{1,2} years old\.", t) is not None),
        ({"guided_choice": ["Paris", "London", "Berlin"]}, lambda t: t in ("Paris", "London", "Berlin")),
        ({"structured_outputs": {"grammar": grammar}}, arithmetic),
        ({"guided_regex": r"(yes|no), because [a-z ]{5,30}\."},
         lambda t: re.fullmatch(r"(yes|no), because [a-z ]{5,30}\.", t) is not None),
    ]

    def one(case):
        (extra, valid), seed = case
        reply = ask(client, "Say something.", seed, extra_body=extra)
        text = reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop" and valid(text), f"{extra} seed {seed}: {text!r}"
        return text
    return pool.map(one, [(case, seed) for case in cases for seed in SEEDS])


def collect_stream(stream) -> tuple[str, list, str]:
    text, calls, finish = "", {}, None
    for chunk in stream:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                entry["id"] = call.id or entry["id"]
                entry["name"] += call.function.name or ""
                entry["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    return text, [calls[i] for i in sorted(calls)], finish


def check_tool_round_trip(client: openai.OpenAI, stream: bool, tool_choice) -> None:
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    common = dict(model="smollm2", tools=[WEATHER, TIME], tool_choice=tool_choice, temperature=0, max_tokens=100)
    if stream:
        _, calls, finish = collect_stream(client.chat.completions.create(messages=messages, stream=True, **common))
    else:
        reply = client.chat.completions.create(messages=messages, **common)
        finish = reply.choices[0].finish_reason
        calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                 for c in reply.choices[0].message.tool_calls]
    assert finish == "tool_calls", f"finish_reason {finish!r}"
    assert calls, "no tool call"
    for call in calls:
        assert call["name"] in ("get_weather", "get_time"), call
        jsonschema.validate(json.loads(call["arguments"]), WEATHER["function"]["parameters"])
    if isinstance(tool_choice, dict):
        assert all(call["name"] == tool_choice["function"]["name"] for call in calls), calls
    messages.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
        for c in calls]})
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": '{"sky": "sunny", "celsius": 21}'})
    final = dict(common, tool_choice="none")
    if stream:
        text, calls, finish = collect_stream(client.chat.completions.create(messages=messages, stream=True, **final))
    else:
        reply = client.chat.completions.create(messages=messages, **final)
        text, calls, finish = reply.choices[0].message.content, reply.choices[0].message.tool_calls, \
            reply.choices[0].finish_reason
    assert text and not calls and finish in ("stop", "length"), (text, calls, finish)


def expect_400(call, param: str) -> None:
    try:
        call()
    except openai.BadRequestError as error:
        assert error.body.get("param") == param, f"blamed {error.body.get('param')!r}, expected {param!r}"
        return
    raise AssertionError(f"a bad {param} was accepted")


def main() -> None:
    with pagoda_server(sys.argv, timeout_s=1800) as client:
        expect_400(lambda: ask(client, "x", 0, response_format={
            "type": "json_schema", "json_schema": {"name": "bad", "schema": {"type": "bogus"}}}), "response_format")
        expect_400(lambda: ask(client, "x", 0, extra_body={"guided_regex": "(unclosed"}), "guided_regex")
        expect_400(lambda: client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "x"}], tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "launch_rockets"}}), "tool_choice")
        for stream in (False, True):
            check_tool_round_trip(client, stream, "required")
            check_tool_round_trip(client, stream, {"type": "function", "function": {"name": "get_time"}})
        with ThreadPoolExecutor(max_workers=256) as pool:
            # Both sets are in flight before either is awaited, so they share the server's batches.
            schema_replies = check_schemas(client, pool)
            other_replies = check_regex_choice_grammar(client, pool)
            schemas, others = len(list(schema_replies)), len(list(other_replies))
        print(f"structured outputs test passed: {schemas} schema replies validated, {others} regex/choice/grammar "
              "replies matched, tool round trips streamed and not")


if __name__ == "__main__":
    main()
