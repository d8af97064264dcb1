//! The stable-Rust mutation fuzzer behind `tests/fuzz.rs`: a counting allocator, byte and
//! JSON mutators, seed inputs made from real files, and the targets.

pub mod alloc;
pub mod mutate;
pub mod seeds;
pub mod targets;
