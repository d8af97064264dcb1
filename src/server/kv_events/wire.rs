//! vLLM's KV-event wire format: an `EventBatch` as msgpack, the way its msgspec structs
//! (`array_like`, tagged) encode it.
//!
//! A batch is `[timestamp, [event, ...], data_parallel_rank]`; each event an array led by
//! its type name: `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
//! lora_id, medium]`, `["BlockRemoved", block_hashes, medium]`, `["AllBlocksCleared"]`.
//! Block hashes are pagoda's 128-bit hashes as 16 big-endian bytes.

use std::convert::Infallible;

use rmp::encode::{self as mp, ByteBuf, ValueWriteError};

use crate::core::events::CacheEvent;
use crate::ids::BlockHash;

/// Where the prefix cache's blocks live, in vLLM's words.
const MEDIUM: &str = "GPU";
/// Where the host KV tier's blocks live.
const HOST_MEDIUM: &str = "CPU";

/// One engine step's prefix-cache changes and when they were handed over.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// Seconds since the Unix epoch.
    pub timestamp: f64,
    /// The changes, in order.
    pub events: Vec<CacheEvent>,
}

/// The msgpack payload of `batch` for blocks of `block_size` tokens.
pub fn encode_batch(batch: &EventBatch, block_size: usize) -> Vec<u8> {
    let mut out = ByteBuf::with_capacity(64 + batch.events.len() * 32);
    ok(mp::write_array_len(&mut out, 3));
    ok(mp::write_f64(&mut out, batch.timestamp));
    ok(mp::write_array_len(&mut out, batch.events.len() as u32));
    for event in &batch.events {
        encode_event(&mut out, event, block_size);
    }
    nil(&mut out);
    out.into_vec()
}

fn encode_event(out: &mut ByteBuf, event: &CacheEvent, block_size: usize) {
    match event {
        CacheEvent::Stored { block_hashes, parent_block_hash, token_ids, lora_id } => {
            ok(mp::write_array_len(out, 7));
            ok(mp::write_str(out, "BlockStored"));
            write_hashes(out, block_hashes);
            match parent_block_hash {
                Some(hash) => ok(mp::write_bin(out, &hash.to_be_bytes())),
                None => nil(out),
            }
            ok(mp::write_array_len(out, token_ids.len() as u32));
            for &token in token_ids {
                ok(mp::write_uint(out, u64::from(token)));
            }
            ok(mp::write_uint(out, block_size as u64));
            match lora_id {
                Some(id) => {
                    ok(mp::write_uint(out, u64::from(*id)).map(drop));
                }
                None => nil(out),
            }
            ok(mp::write_str(out, MEDIUM));
        }
        CacheEvent::Removed { block_hashes } => {
            ok(mp::write_array_len(out, 3));
            ok(mp::write_str(out, "BlockRemoved"));
            write_hashes(out, block_hashes);
            ok(mp::write_str(out, MEDIUM));
        }
        CacheEvent::Cleared => {
            ok(mp::write_array_len(out, 1));
            ok(mp::write_str(out, "AllBlocksCleared"));
        }
        // As vLLM's offloading connector reports its blocks: no parent, no tokens.
        CacheEvent::HostStored { block_hashes } => {
            ok(mp::write_array_len(out, 7));
            ok(mp::write_str(out, "BlockStored"));
            write_hashes(out, block_hashes);
            nil(out);
            ok(mp::write_array_len(out, 0));
            ok(mp::write_uint(out, block_size as u64));
            nil(out);
            ok(mp::write_str(out, HOST_MEDIUM));
        }
        CacheEvent::HostRemoved { block_hashes } => {
            ok(mp::write_array_len(out, 3));
            ok(mp::write_str(out, "BlockRemoved"));
            write_hashes(out, block_hashes);
            ok(mp::write_str(out, HOST_MEDIUM));
        }
    }
}

fn write_hashes(out: &mut ByteBuf, hashes: &[BlockHash]) {
    ok(mp::write_array_len(out, hashes.len() as u32));
    for hash in hashes {
        ok(mp::write_bin(out, &hash.to_be_bytes()));
    }
}

fn nil(out: &mut ByteBuf) {
    let Ok(()) = mp::write_nil(out);
}

/// The value of a write into a growable buffer, which cannot fail.
fn ok<T>(result: Result<T, ValueWriteError<Infallible>>) -> T {
    match result {
        Ok(value) => value,
        Err(ValueWriteError::InvalidMarkerWrite(never) | ValueWriteError::InvalidDataWrite(never)) => {
            match never {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_bytes(hash: BlockHash) -> Vec<u8> {
        let mut out = vec![0xc4, 16];
        out.extend(hash.to_be_bytes());
        out
    }

    #[test]
    fn encodes_vllms_tagged_arrays_byte_for_byte() {
        let batch = EventBatch {
            timestamp: 1.5,
            events: vec![
                CacheEvent::Stored {
                    block_hashes: vec![7],
                    parent_block_hash: None,
                    token_ids: vec![1, 300],
                    lora_id: None,
                },
                CacheEvent::Removed { block_hashes: vec![u128::MAX] },
                CacheEvent::Cleared,
            ],
        };
        let mut expected = vec![0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x93];
        expected.extend([0x97, 0xab]);
        expected.extend(b"BlockStored");
        expected.push(0x91);
        expected.extend(hash_bytes(7));
        expected.extend([0xc0, 0x92, 0x01, 0xcd, 0x01, 0x2c, 0x02, 0xc0, 0xa3]);
        expected.extend(b"GPU");
        expected.extend([0x93, 0xac]);
        expected.extend(b"BlockRemoved");
        expected.push(0x91);
        expected.extend(hash_bytes(u128::MAX));
        expected.push(0xa3);
        expected.extend(b"GPU");
        expected.extend([0x91, 0xb0]);
        expected.extend(b"AllBlocksCleared");
        expected.push(0xc0);
        assert_eq!(encode_batch(&batch, 2), expected);
    }

    #[test]
    fn host_blocks_are_stored_and_removed_on_the_cpu_medium_without_tokens() {
        let batch = EventBatch {
            timestamp: 1.5,
            events: vec![
                CacheEvent::HostStored { block_hashes: vec![7] },
                CacheEvent::HostRemoved { block_hashes: vec![7] },
            ],
        };
        let mut expected = vec![0x93, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x92];
        expected.extend([0x97, 0xab]);
        expected.extend(b"BlockStored");
        expected.push(0x91);
        expected.extend(hash_bytes(7));
        expected.extend([0xc0, 0x90, 0x10, 0xc0, 0xa3]);
        expected.extend(b"CPU");
        expected.extend([0x93, 0xac]);
        expected.extend(b"BlockRemoved");
        expected.push(0x91);
        expected.extend(hash_bytes(7));
        expected.push(0xa3);
        expected.extend(b"CPU");
        expected.push(0xc0);
        assert_eq!(encode_batch(&batch, 16), expected);
    }

    #[test]
    fn a_stored_run_names_its_parent() {
        let batch = EventBatch {
            timestamp: 0.0,
            events: vec![CacheEvent::Stored {
                block_hashes: vec![],
                parent_block_hash: Some(5),
                token_ids: vec![],
                lora_id: None,
            }],
        };
        let bytes = encode_batch(&batch, 16);
        let parent = hash_bytes(5);
        assert!(bytes.windows(parent.len()).any(|window| window == parent.as_slice()));
    }
}
