//! The identifiers every layer shares: tokens, requests, KV blocks and block hashes.
//!
//! A leaf module: it imports nothing from the crate, so any module may use it. Block hashes
//! travel in JSON through [`hex_hash`].

/// A token id of the model's vocabulary.
pub type TokenId = u32;

/// Identifies a request inside one engine.
pub type RequestId = u64;

/// Index of a KV block in the pool; block 0 is the null block.
pub type BlockId = u32;

/// A full block's chained 128-bit hash (see `core::block_hash`).
pub type BlockHash = u128;

/// Block hashes in JSON as 32-digit hex strings (JSON numbers cannot hold 128 bits).
pub mod hex_hash {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::BlockHash;

    /// Writes the hash as 32 hex digits.
    pub fn serialize<S: Serializer>(hash: &BlockHash, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&format!("{hash:032x}"))
    }

    /// Reads 32 hex digits.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BlockHash, D::Error> {
        let text = String::deserialize(deserializer)?;
        BlockHash::from_str_radix(&text, 16).map_err(serde::de::Error::custom)
    }

    /// The same for an optional hash (`null` when absent).
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};

        use super::super::BlockHash;

        /// Writes the hash as 32 hex digits, or `null`.
        pub fn serialize<S: Serializer>(hash: &Option<BlockHash>, serializer: S) -> Result<S::Ok, S::Error> {
            match hash {
                Some(hash) => super::serialize(hash, serializer),
                None => serializer.serialize_none(),
            }
        }

        /// Reads 32 hex digits or `null`.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<BlockHash>, D::Error> {
            Option::<String>::deserialize(deserializer)?
                .map(|text| BlockHash::from_str_radix(&text, 16).map_err(serde::de::Error::custom))
                .transpose()
        }
    }
}
