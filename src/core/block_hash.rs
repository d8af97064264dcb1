//! Chained 128-bit hashes of full KV blocks.
//!
//! A block's hash covers its parent block's hash (a fixed root for the first block), its
//! token ids and its extra keys (the request's `cache_salt` and LoRA adapter name, on the first
//! block only). Two requests share a block exactly when their token prefixes up to and
//! including that block are equal and their salts and adapters are equal.

use xxhash_rust::xxh3::Xxh3Default;

use crate::core::request::Request;
use crate::ids::{BlockHash, TokenId};

/// The parent hash of a request's first block.
pub const ROOT_BLOCK_HASH: BlockHash = 0x7061_676f_6461_2d6b_762d_626c_6f63_6b30;

/// Hashes one full block: its parent's hash, its token ids and an optional salt.
pub fn hash_block(
    parent: BlockHash,
    token_ids: impl IntoIterator<Item = TokenId>,
    salt: Option<&str>,
) -> BlockHash {
    hash_block_with_lora(parent, token_ids, salt, None)
}

/// [`hash_block`] with the name of the LoRA adapter the block's keys and values were computed
/// with (`None`: the base model, the same hash as [`hash_block`]).
pub fn hash_block_with_lora(
    parent: BlockHash,
    token_ids: impl IntoIterator<Item = TokenId>,
    salt: Option<&str>,
    lora: Option<&str>,
) -> BlockHash {
    let mut hasher = Xxh3Default::new();
    hasher.update(&parent.to_le_bytes());
    let mut num_tokens: u64 = 0;
    for token in token_ids {
        hasher.update(&token.to_le_bytes());
        num_tokens += 1;
    }
    hasher.update(&num_tokens.to_le_bytes());
    match salt {
        Some(salt) => {
            hasher.update(&[1]);
            hasher.update(&(salt.len() as u64).to_le_bytes());
            hasher.update(salt.as_bytes());
        }
        None => hasher.update(&[0]),
    }
    if let Some(name) = lora {
        hasher.update(&[2]);
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
    }
    hasher.digest128()
}

/// Appends to `request.block_hashes` the hashes of every block that became full since the
/// last call; returns how many were added.
pub fn extend_block_hashes(request: &mut Request, block_size: usize) -> usize {
    let num_full_blocks = request.num_tokens() / block_size;
    let before = request.block_hashes.len();
    for block_index in before..num_full_blocks {
        let parent = if block_index == 0 { ROOT_BLOCK_HASH } else { request.block_hashes[block_index - 1] };
        let salt = if block_index == 0 { request.cache_salt.as_deref() } else { None };
        let lora = if block_index == 0 { request.lora.as_ref().map(|l| l.name.as_str()) } else { None };
        let start = block_index * block_size;
        let tokens = (start..start + block_size).map(|i| request.token(i));
        let hash = hash_block_with_lora(parent, tokens, salt, lora);
        request.block_hashes.push(hash);
    }
    num_full_blocks - before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplingParams;

    fn request(tokens: Vec<TokenId>, salt: Option<&str>) -> Request {
        let mut req = Request::new(1, tokens, SamplingParams::greedy(4), None, 0.0);
        req.cache_salt = salt.map(str::to_owned);
        req
    }

    #[test]
    fn hashes_only_full_blocks_and_chains_them() {
        let mut req = request((0..10).collect(), None);
        assert_eq!(extend_block_hashes(&mut req, 4), 2);
        assert_eq!(req.block_hashes.len(), 2);
        assert_eq!(req.block_hashes[0], hash_block(ROOT_BLOCK_HASH, [0, 1, 2, 3], None));
        assert_eq!(req.block_hashes[1], hash_block(req.block_hashes[0], [4, 5, 6, 7], None));
        req.output_token_ids.extend([10, 11]);
        assert_eq!(extend_block_hashes(&mut req, 4), 1);
        assert_eq!(req.block_hashes[2], hash_block(req.block_hashes[1], [8, 9, 10, 11], None));
        assert_eq!(extend_block_hashes(&mut req, 4), 0);
    }

    #[test]
    fn same_tokens_different_parent_differ() {
        let a = hash_block(ROOT_BLOCK_HASH, [1, 2], None);
        let b = hash_block(a, [1, 2], None);
        assert_ne!(a, b);
    }

    #[test]
    fn salt_changes_only_the_first_block_input() {
        let mut plain = request((0..8).collect(), None);
        let mut salted = request((0..8).collect(), Some("tenant-a"));
        let mut other = request((0..8).collect(), Some("tenant-b"));
        extend_block_hashes(&mut plain, 4);
        extend_block_hashes(&mut salted, 4);
        extend_block_hashes(&mut other, 4);
        assert_ne!(plain.block_hashes[0], salted.block_hashes[0]);
        assert_ne!(salted.block_hashes[0], other.block_hashes[0]);
        assert_eq!(salted.block_hashes[1], hash_block(salted.block_hashes[0], [4, 5, 6, 7], None));
        assert_ne!(plain.block_hashes[1], salted.block_hashes[1]);
    }

    #[test]
    fn empty_salt_differs_from_no_salt() {
        assert_ne!(hash_block(ROOT_BLOCK_HASH, [1], Some("")), hash_block(ROOT_BLOCK_HASH, [1], None));
    }
}
