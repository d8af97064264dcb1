//! Llama-family model definitions and the file formats they come in.
