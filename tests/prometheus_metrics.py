#!/usr/bin/env python3
"""`/metrics` of `pagoda serve --metrics-prefix vllm` through prometheus_client's parser.

Usage: tests/prometheus_metrics.py PAGODA_BINARY [MODEL]. Starts the server on the simulated
executor (the tokenizer from MODEL, else the default model) on a free loopback port, runs a
few completions, and checks that every metric a vLLM-aware router or dashboard reads is
there under vLLM's exact name, with the right type and labels, and that
kv_cache_usage_perc is a fraction.
"""

import json
import socket
import subprocess
import sys
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

MODEL_LABELS = {"model_name", "engine"}

# name (as the parser reports it) -> (type, label names of its samples)
EXPECTED = {
    "vllm:num_requests_running": ("gauge", MODEL_LABELS),
    "vllm:num_requests_waiting": ("gauge", MODEL_LABELS),
    "vllm:kv_cache_usage_perc": ("gauge", MODEL_LABELS),
    "vllm:gpu_cache_usage_perc": ("gauge", MODEL_LABELS),
    "vllm:num_preemptions": ("counter", MODEL_LABELS),
    "vllm:prefix_cache_queries": ("counter", MODEL_LABELS),
    "vllm:prefix_cache_hits": ("counter", MODEL_LABELS),
    "vllm:prompt_tokens": ("counter", MODEL_LABELS),
    "vllm:generation_tokens": ("counter", MODEL_LABELS),
    "vllm:request_success": ("counter", MODEL_LABELS | {"finished_reason"}),
    "vllm:time_to_first_token_seconds": ("histogram", MODEL_LABELS),
    "vllm:inter_token_latency_seconds": ("histogram", MODEL_LABELS),
    "vllm:time_per_output_token_seconds": ("histogram", MODEL_LABELS),
    "vllm:e2e_request_latency_seconds": ("histogram", MODEL_LABELS),
    "vllm:cache_config_info": (
        "gauge",
        {"block_size", "num_gpu_blocks", "num_cpu_blocks", "enable_prefix_caching", "engine"},
    ),
    "vllm:lora_requests_info": ("gauge", {"max_lora", "running_lora_adapters", "waiting_lora_adapters"}),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read().decode()


def wait_healthy(base: str, server: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"pagoda serve exited with {server.returncode}")
        try:
            get(f"{base}/health")
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("pagoda serve did not become healthy")


def check(text: str) -> None:
    families = {family.name: family for family in text_string_to_metric_families(text)}
    for name, (kind, labels) in EXPECTED.items():
        family = families.get(name)
        if family is None:
            raise SystemExit(f"metric {name} is missing")
        if family.type != kind:
            raise SystemExit(f"{name} is a {family.type}, not a {kind}")
        for sample in family.samples:
            names = set(sample.labels) - {"le"}
            if names != labels:
                raise SystemExit(f"{sample.name} has labels {sorted(names)}, not {sorted(labels)}")
    for family in families.values():
        if not family.name.startswith("vllm:"):
            raise SystemExit(f"{family.name} does not carry the vllm: prefix")
    usage = families["vllm:kv_cache_usage_perc"].samples[0].value
    if not 0.0 <= usage <= 1.0:
        raise SystemExit(f"kv_cache_usage_perc {usage} is not a fraction")
    info = families["vllm:cache_config_info"].samples[0]
    if info.value != 1.0 or info.labels["block_size"] != "16" or info.labels["num_gpu_blocks"] != "64":
        raise SystemExit(f"cache_config_info is {info}")
    lora = families["vllm:lora_requests_info"].samples[0]
    if lora.value < 1.7e9 or any(lora.labels.values()):
        raise SystemExit(f"lora_requests_info is {lora}")
    success = families["vllm:request_success"].samples
    if sum(s.value for s in success if s.labels["finished_reason"] == "length") != 3:
        raise SystemExit(f"request_success counts {success}")
    ttft = [s for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")]
    if ttft[0].value != 3:
        raise SystemExit(f"time_to_first_token_seconds counts {ttft}")


def main() -> None:
    binary = sys.argv[1]
    port = free_port()
    args = [binary, "serve", "--executor", "sim", "--port", str(port), "--metrics-prefix", "vllm"]
    args += ["--num-gpu-blocks", "64", "--served-model-name", "m"]
    if len(sys.argv) > 2:
        args += ["--model", sys.argv[2]]
    server = subprocess.Popen(args)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, server)
        for index in range(3):
            body = json.dumps({"prompt": f"hello {index}", "max_tokens": 5, "ignore_eos": True}).encode()
            request = urllib.request.Request(
                f"{base}/v1/completions", data=body, headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                json.loads(response.read())
        check(get(f"{base}/metrics"))
    finally:
        server.terminate()
        server.wait(timeout=60)
    if server.returncode != 0:
        raise SystemExit(f"pagoda serve exited with {server.returncode} after SIGTERM")
    print("prometheus metrics: every vllm: name present with its type and labels")


if __name__ == "__main__":
    main()
