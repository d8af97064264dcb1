//! pagoda as a library: build an engine, then stream a chat reply piece by piece.
//!
//! `cargo run --release --example embed -- [MODEL.gguf | HF_DIR]` (the default model when
//! none is given). Each `step` returns the text every request completed in that step;
//! printing it as it comes is streaming.

use std::io::Write;

use pagoda::{ChatMessage, Engine, Prompt, SamplingParams};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Engine::builder().show_progress(true);
    if let Some(model) = std::env::args().nth(1) {
        builder = builder.model(model);
    }
    let mut engine = builder.build()?;

    let conversation = vec![
        ChatMessage::new("system", "You are a concise assistant."),
        ChatMessage::new("user", "Name three colours of the rainbow."),
    ];
    let params = SamplingParams { temperature: 0.0, max_tokens: 48, ..SamplingParams::default() };
    let request_id = engine.add_request(Prompt::Chat(conversation), params)?;

    let mut stdout = std::io::stdout();
    while engine.has_unfinished_requests() {
        for output in engine.step()? {
            if output.request_id == request_id {
                print!("{}", output.new_text);
                stdout.flush()?;
                if let Some(reason) = output.finish_reason {
                    println!("\n[{} after {} tokens]", reason.as_str(), output.num_output_tokens);
                }
            }
        }
    }
    Ok(())
}
