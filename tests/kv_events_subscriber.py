#!/usr/bin/env python3
"""A KV-cache event subscriber as a router writes one (pyzmq + msgpack), for the tests.

Usage: tests/kv_events_subscriber.py TOPIC. Binds a SUB socket on a free loopback port and
prints `PORT <port>` (the server's PUB connects to it, as vLLM replicas connect to llm-d's
indexer). It then reads every batch until a line `DONE <replay endpoint>` arrives on
stdin. It pretends batches 2..4 never arrived, asks the replay socket for every batch from
the first one it lacks, checks that the replay starts there, repeats each batch it got
live byte for byte and fills the gap, so that the sequence numbers run 0..N without one,
decodes every batch (vLLM's EventBatch and its
tagged BlockStored / BlockRemoved / AllBlocksCleared arrays), rebuilds the set of cached
block hashes with each one's whole token chain (medium GPU) and the set of hashes in the
host tier (medium CPU, stored without tokens, as vLLM's offloading connector reports them),
and prints them as one JSON object.
"""

import json
import sys

import msgpack
import zmq

END_OF_REPLAY = (-1).to_bytes(8, "big", signed=True)
# Live batches the subscriber pretends it never got, to catch up on them by replay.
LOST = range(2, 5)


def fail(message: str) -> None:
    raise SystemExit(f"kv_events_subscriber: {message}")


def read_live(sub: zmq.Socket, topic: bytes, live: dict) -> None:
    """Takes every message waiting on `sub` into `live` (sequence -> payload)."""
    while sub.poll(0):
        frames = sub.recv_multipart()
        if len(frames) != 3 or frames[0] != topic or len(frames[1]) != 8:
            fail(f"bad message frames {[len(f) for f in frames]}")
        seq = int.from_bytes(frames[1], "big")
        if live and seq != max(live) + 1:
            fail(f"live sequence jumped from {max(live)} to {seq}")
        live[seq] = frames[2]


def replay_from(context: zmq.Context, endpoint: str, start: int) -> dict:
    """Every batch the replay socket holds from `start` on."""
    dealer = context.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    replayed = {}
    while True:
        if not dealer.poll(30_000):
            fail("the replay socket did not answer")
        empty, seq, payload = dealer.recv_multipart()
        if empty != b"":
            fail("a replay answer must start with an empty frame")
        if seq == END_OF_REPLAY:
            if payload != b"":
                fail("the end marker carries a payload")
            break
        replayed[int.from_bytes(seq, "big")] = payload
    dealer.close()
    return replayed


def apply(batch: list, cached: dict, counts: dict, host: set) -> None:
    """Applies one decoded EventBatch to `cached` (hash -> whole token chain) and `host`."""
    if len(batch) != 3 or not isinstance(batch[0], float) or not isinstance(batch[1], list):
        fail(f"not an EventBatch: {batch!r:.200}")
    if batch[2] is not None:
        fail("data_parallel_rank must be nil")
    for event in batch[1]:
        tag = event[0]
        counts[tag] = counts.get(tag, 0) + 1
        if tag == "BlockStored":
            _, hashes, parent, tokens, block_size, lora_id, medium = event
            if medium == "CPU" and lora_id is None and parent is None and tokens == []:
                for block_hash in hashes:
                    if block_hash in host:
                        fail("a hash was stored twice in the host tier")
                    host.add(block_hash)
                continue
            if lora_id is not None or medium != "GPU":
                fail(f"unexpected lora_id/medium {lora_id!r} {medium!r}")
            if len(tokens) != len(hashes) * block_size:
                fail("token_ids do not fill the stored blocks")
            if parent is not None and parent not in cached:
                fail("a stored block's parent is not cached")
            chain = list(cached[parent]) if parent is not None else []
            for index, block_hash in enumerate(hashes):
                if not isinstance(block_hash, bytes) or len(block_hash) != 16:
                    fail("block hashes must be 16 bytes")
                if block_hash in cached:
                    fail("a hash was stored twice")
                chain = chain + tokens[index * block_size : (index + 1) * block_size]
                cached[block_hash] = chain
        elif tag == "BlockRemoved":
            _, hashes, medium = event
            if medium == "CPU":
                for block_hash in hashes:
                    if block_hash not in host:
                        fail("removed a host hash that was never stored")
                    host.remove(block_hash)
                continue
            if medium != "GPU":
                fail(f"unexpected medium {medium!r}")
            for block_hash in hashes:
                if block_hash not in cached:
                    fail("removed a hash that was never stored")
                del cached[block_hash]
        elif tag == "AllBlocksCleared":
            if len(event) != 1:
                fail("AllBlocksCleared has no fields")
            cached.clear()
        else:
            fail(f"unknown event {tag!r}")


def main() -> None:
    topic = sys.argv[1].encode()
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    print(f"PORT {port}", flush=True)

    live: dict = {}
    poller = zmq.Poller()
    poller.register(sub, zmq.POLLIN)
    poller.register(sys.stdin, zmq.POLLIN)
    while True:
        ready = dict(poller.poll())
        if sub in ready:
            read_live(sub, topic, live)
        if sys.stdin.fileno() in ready or sys.stdin in ready:
            line = sys.stdin.readline().split()
            if line[:1] == ["DONE"]:
                replay_endpoint = line[1]
                break
    read_live(sub, topic, live)

    # Act as if batches 2..5 were lost on the way, then catch up from the first gap.
    received = {seq: payload for seq, payload in live.items() if not LOST.start <= seq < LOST.stop}
    first_missing = next(seq for seq in range(len(live) + len(LOST) + 1) if seq not in received)
    replayed = replay_from(context, replay_endpoint, first_missing)
    if not replayed or min(replayed) != first_missing:
        fail(f"a replay from {first_missing} does not start there: {sorted(replayed)[:3]}")
    for seq, payload in replayed.items():
        if seq in live and live[seq] != payload:
            fail(f"replay of batch {seq} differs from the live one")
    batches = {**received, **replayed}
    if sorted(batches) != list(range(len(batches))):
        fail("the sequence numbers have a gap after the replay")

    cached: dict = {}
    counts: dict = {}
    host: set = set()
    for seq in range(len(batches)):
        apply(msgpack.unpackb(batches[seq], raw=False), cached, counts, host)
    print(
        json.dumps(
            {
                "num_batches": len(batches),
                "num_live": len(live),
                "num_replayed": len(replayed),
                "events": counts,
                "cached": {block_hash.hex(): chain for block_hash, chain in cached.items()},
                "host": sorted(block_hash.hex() for block_hash in host),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
