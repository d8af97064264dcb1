//! LoRA in the engine core: the prefix cache keys blocks by adapter (two adapters never share
//! cached KV, the same adapter does), KV events carry the adapter's `lora_id`, and a step
//! holds at most `max_loras` distinct adapters (vLLM's rule: a waiting request of another
//! adapter waits, the requests behind it may go first).

mod core_support;

use core_support::{fake_step, request, scheduler, tokens};
use pagoda::core::events::CacheEvent;
use pagoda::core::lora::LoraRequest;
use pagoda::{Request, RequestId, TokenId};

fn with_lora(id: RequestId, prompt: Vec<TokenId>, max_tokens: usize, lora: Option<u32>) -> Request {
    let mut r = request(id, prompt, max_tokens);
    r.lora = lora.map(|id| LoraRequest { id, name: format!("adapter-{id}") });
    r
}

#[test]
fn cached_blocks_are_shared_within_an_adapter_only_and_stored_with_its_id() {
    let mut s = scheduler(512, 64);
    let log = s.cache_event_log();
    log.start();
    s.add_request(with_lora(0, tokens(0, 40), 1, Some(7))).unwrap();
    fake_step(&mut s);
    // The same prompt: another adapter and the base miss, the same adapter hits 2 blocks.
    s.add_request(with_lora(1, tokens(0, 40), 4, Some(8))).unwrap();
    s.add_request(with_lora(2, tokens(0, 40), 4, None)).unwrap();
    s.add_request(with_lora(3, tokens(0, 40), 4, Some(7))).unwrap();
    fake_step(&mut s);
    let cached: Vec<usize> = (1..=3).map(|id| s.get_request(id).map_or(0, |r| r.num_cached_tokens)).collect();
    assert_eq!(cached, [0, 0, 32]);
    let stored: Vec<(usize, Option<u32>)> = log
        .take()
        .into_iter()
        .filter_map(|e| match e {
            CacheEvent::Stored { block_hashes, lora_id, .. } => Some((block_hashes.len(), lora_id)),
            _ => None,
        })
        .collect();
    assert_eq!(stored, [(2, Some(7)), (2, Some(8)), (2, None)]);
}

#[test]
fn a_step_holds_at_most_max_loras_adapters() {
    let mut s = scheduler(512, 64);
    s.set_max_loras(2);
    let loras = [Some(1), Some(2), Some(3), None, Some(1), Some(3)];
    for (id, lora) in loras.into_iter().enumerate() {
        s.add_request(with_lora(id as RequestId, tokens(100 * id as u32, 8), 4, lora)).unwrap();
    }
    fake_step(&mut s);
    // Adapter 3 waits (1 and 2 are running); the base request and adapter 1's second pass it.
    let mut running = s.running_ids().to_vec();
    running.sort_unstable();
    assert_eq!(running, [0, 1, 3, 4]);
    assert_eq!(s.waiting_ids(), [2, 5]);
    // Once adapters 1 and 2 finish, adapter 3's two requests run together.
    for _ in 0..4 {
        fake_step(&mut s);
    }
    let mut running = s.running_ids().to_vec();
    running.sort_unstable();
    assert_eq!(running, [2, 5]);
}
