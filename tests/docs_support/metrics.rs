//! The metrics reference: every series `/metrics` exposes, from the exposition itself.

use std::collections::BTreeSet;
use std::fmt::Write;

use pagoda::engine::metrics::EngineMetrics;
use pagoda::server::prometheus::{CacheInfo, Exposition, MetricsPrefix, render};

/// Labels every series carries, named once in the page's text rather than in each row.
const COMMON_LABELS: [&str; 3] = ["model_name", "engine", "le"];

/// One metric family: its name without the prefix, type, help and own labels.
struct Family {
    name: String,
    kind: String,
    help: String,
    labels: BTreeSet<String>,
}

/// The families of a text exposition under `prefix`, in the order it lists them.
fn families(text: &str, prefix: &str) -> Vec<Family> {
    let mut families: Vec<Family> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            let name = name.strip_prefix(prefix).expect("prefixed name").to_owned();
            families.push(Family {
                name,
                kind: String::new(),
                help: help.to_owned(),
                labels: BTreeSet::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let family = families.last_mut().expect("TYPE after HELP");
            family.kind = rest.rsplit(' ').next().expect("TYPE name kind").to_owned();
        } else if let Some((series, _)) = line.split_once('{') {
            let family = families.last_mut().expect("a sample after its HELP");
            assert!(series.strip_prefix(prefix).is_some_and(|s| s.starts_with(&family.name)), "{line}");
            let labels = line[series.len() + 1..].split_once('}').expect("labels end").0;
            for label in labels.split(',').filter_map(|pair| pair.split_once('=')).map(|(k, _)| k) {
                if !COMMON_LABELS.contains(&label) {
                    family.labels.insert(label.to_owned());
                }
            }
        }
    }
    families
}

/// The page: a table of every family, KV events' counter included.
pub fn page() -> String {
    let exposition = Exposition {
        prefix: MetricsPrefix::Pagoda,
        model_name: "model",
        cache: CacheInfo { block_size: 16, num_gpu_blocks: 1024, enable_prefix_caching: true },
        kv_events_dropped: Some(0),
        lora: &pagoda::engine::lora::LoraUsage::default(),
    };
    let text = render(&EngineMetrics::default(), &exposition);
    let mut page = format!(
        "# Metrics reference\n\n{}\n\n`GET /metrics` answers in the Prometheus text format. Each name below takes the \
         prefix `pagoda:`, or `vllm:` with `--metrics-prefix vllm`. Every series carries the labels `model_name` \
         (the served model's name) and `engine` (`0`); histograms add `le`. The request counters \
         `prompt_tokens_total`, `generation_tokens_total` and `request_success_total` have a series per served \
         model: `model_name` is the base model's name for its own requests and a [LoRA \
         adapter](../lora.md#serving)'s name for that adapter's. The [server \
         chapter](../server.md#metrics) says how routers use them.\n\n\
         | metric | type | labels | meaning |\n| --- | --- | --- | --- |\n",
        super::GENERATED
    );
    for family in families(&text, "pagoda:") {
        let labels: Vec<String> = family.labels.iter().map(|l| format!("`{l}`")).collect();
        let _ = writeln!(
            page,
            "| `{}` | {} | {} | {} |",
            family.name,
            family.kind,
            labels.join(", "),
            family.help
        );
    }
    page.push_str(
        "\n`kv_events_dropped_batches_total` is there only while KV-cache events are published \
         (`--kv-events-config`).\n",
    );
    page
}
