//! Llama-family model definitions and the file formats they come in.

pub mod architecture;
pub mod chat;
pub mod fed_ids;
pub mod files;
pub mod footprint;
mod gated_mlp;
pub mod gguf;
pub mod gguf_split;
pub mod gguf_vocab;
pub mod gpt_oss;
pub mod layer_pattern;
pub mod llama;
pub mod lora;
pub mod moe;
mod moe_layer;
pub mod random;
pub mod reasoning;
pub mod safetensors;
pub mod sentencepiece;
pub mod source;
pub mod tensor;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod tokenizer;
pub mod weights;
pub mod yarn;

pub use architecture::{ModelConfig, RopeScaling, RopeVariant};
pub use chat::{ChatMessage, ChatTemplate};
pub use files::{ModelError, ModelFiles, default_model_path};
pub use source::resolve_model_path;
pub use tensor::TensorView;
pub use tokenizer::Tokenizer;
