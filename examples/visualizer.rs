//! The live KV-block visualizer on a simulated workload.
//!
//! ```text
//! cargo run --example visualizer                                   # shared prefixes, live
//! cargo run --example visualizer -- --workload memory-pressure     # preemptions, live
//! cargo run --example visualizer -- --record run.jsonl             # live, and record a trace
//! cargo run --example visualizer -- --replay run.jsonl             # replay it
//! cargo run --example visualizer -- --snapshot out.png --step 120  # one frame, no display
//! ```

use clap::Parser;
use pagoda::viz::{self, VizArgs};

/// Watch the paged KV cache of a simulated engine.
#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    viz: VizArgs,
}

fn main() {
    tracing_subscriber::fmt().with_env_filter(tracing_subscriber::EnvFilter::from_default_env()).init();
    let cli = Cli::parse();
    if let Err(error) = viz::run(&cli.viz) {
        eprintln!("visualizer: {error}");
        std::process::exit(1);
    }
}
