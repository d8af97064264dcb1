//! Llama-family model definitions and the file formats they come in.

pub mod chat;
pub mod config;
pub mod files;
pub mod gguf;
pub mod gguf_vocab;
pub mod llama;
pub mod safetensors;
pub mod sentencepiece;
pub mod tensor;
pub mod testing;
pub mod tokenizer;
pub mod weights;

pub use chat::{ChatMessage, ChatTemplate};
pub use config::{ModelConfig, RopeScaling, RopeVariant};
pub use files::{ModelError, ModelFiles, default_model_path};
pub use tensor::TensorView;
pub use tokenizer::Tokenizer;
