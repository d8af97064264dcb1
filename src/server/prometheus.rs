//! `/metrics` in the Prometheus text format, named as vLLM names its metrics — under a
//! `pagoda:` prefix by default, or exactly vLLM's `vllm:` names (`--metrics-prefix vllm`) so
//! that routers and dashboards built for vLLM (the Gateway API Inference Extension's endpoint
//! picker, llm-d) read a pagoda replica unchanged. Series carry vLLM's `model_name` and
//! `engine` labels.

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::core::host_tier::HostTierStats;
use crate::core::metrics::SpecDecodingStats;
use crate::engine::lora::LoraUsage;
use crate::engine::metrics::{EngineMetrics, Histogram, RequestCounts};

/// The prefix of every metric name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum MetricsPrefix {
    /// `pagoda:`.
    #[default]
    Pagoda,
    /// `vllm:`, vLLM's own names.
    Vllm,
}

impl MetricsPrefix {
    /// The prefix without its colon.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pagoda => "pagoda",
            Self::Vllm => "vllm",
        }
    }
}

/// The KV cache's shape, for `cache_config_info`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheInfo {
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks in the pool, the null block included.
    pub num_gpu_blocks: usize,
    /// Whether full blocks are shared by prefix.
    pub enable_prefix_caching: bool,
}

/// What `/metrics` shows besides the engine's metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposition<'a> {
    /// The names' prefix.
    pub prefix: MetricsPrefix,
    /// The served model's name (the `model_name` label).
    pub model_name: &'a str,
    /// The KV cache's shape.
    pub cache: CacheInfo,
    /// KV event batches dropped because the publisher lagged, when events are published.
    pub kv_events_dropped: Option<u64>,
    /// The LoRA adapters of the running and waiting requests (`max_loras` 0: LoRA is off).
    pub lora: &'a LoraUsage,
}

/// The host KV tier's series: vLLM's external prefix cache counters (tokens looked up and
/// found below the GPU pool) and the tier's own usage, blocks and bytes moved, copy time.
fn render_host_tier(out: &mut Writer, host: &HostTierStats, block_size: u64) {
    let counters = [
        (
            "external_prefix_cache_queries",
            "External prefix cache queries (the host KV tier), in terms of number of queried tokens.",
            host.num_queried_blocks * block_size,
        ),
        (
            "external_prefix_cache_hits",
            "External prefix cache hits (the host KV tier), in terms of number of cached tokens.",
            host.num_hit_blocks * block_size,
        ),
        ("kv_offload_loaded_blocks", "KV blocks loaded from the host tier.", host.num_loaded_blocks),
        ("kv_offload_stored_blocks", "KV blocks stored into the host tier.", host.num_stored_blocks),
        ("kv_offload_evicted_blocks", "KV blocks evicted from the host tier.", host.num_evicted_blocks),
        ("kv_offload_loaded_bytes", "Bytes copied from the host tier to the GPU.", host.load_bytes),
        ("kv_offload_stored_bytes", "Bytes copied from the GPU to the host tier.", host.store_bytes),
        (
            "kv_offload_failed_copies",
            "Host KV tier copies that failed (their blocks are recomputed).",
            host.num_failed_copies,
        ),
    ];
    for (name, help, value) in counters {
        out.counter(name, help, value);
    }
    out.gauge("kv_offload_usage_perc", "Host KV tier usage. 1 means 100 percent usage.", host.usage());
    out.gauge(
        "kv_offload_copy_seconds",
        "Seconds spent on host KV tier copies since start.",
        host.copy_seconds,
    );
}

/// The Prometheus exposition of `metrics`.
pub fn render(metrics: &EngineMetrics, exposition: &Exposition<'_>) -> String {
    let mut out = Writer {
        out: String::new(),
        prefix: exposition.prefix.as_str(),
        labels: format!("model_name=\"{}\",engine=\"0\"", escape_label(exposition.model_name)),
    };
    let scheduler = &metrics.scheduler;
    out.gauge(
        "num_requests_running",
        "Number of requests in model execution batches.",
        scheduler.num_running as f64,
    );
    out.gauge(
        "num_requests_waiting",
        "Number of requests waiting to be processed.",
        scheduler.num_waiting as f64,
    );
    out.gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", scheduler.kv_cache_usage);
    out.gauge(
        "gpu_cache_usage_perc",
        "GPU KV-cache usage. 1 means 100 percent usage (the name vLLM used before kv_cache_usage_perc).",
        scheduler.kv_cache_usage,
    );

    out.counter(
        "prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        scheduler.prefix_cache.queries,
    );
    out.counter(
        "prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        scheduler.prefix_cache.hits,
    );
    out.counter(
        "num_preemptions",
        "Cumulative number of preemptions from the engine.",
        scheduler.num_preemptions,
    );
    out.counter(
        "num_recomputed_tokens",
        "Tokens computed again after preemption or invalid blocks.",
        scheduler.num_recomputed_tokens,
    );
    if let Some(host) = &scheduler.host_tier {
        render_host_tier(&mut out, host, exposition.cache.block_size as u64);
    }
    // Request counters per served model: the base model's requests under its name, each LoRA
    // adapter's under the adapter's (summed over `model_name`, the engine's totals).
    let served = served_counts(metrics, exposition.model_name);
    out.header("prompt_tokens_total", "Number of prefill tokens processed.", "counter");
    for (model, counts) in &served {
        out.sample_of(model, "prompt_tokens_total", "", counts.prompt_tokens);
    }
    out.header("generation_tokens_total", "Number of generation tokens processed.", "counter");
    for (model, counts) in &served {
        out.sample_of(model, "generation_tokens_total", "", counts.generation_tokens);
    }
    render_spec_decoding(&mut out, &scheduler.spec_decoding);
    let overlap = &metrics.host_overlap;
    for (name, help, seconds) in [
        (
            "engine_host_hidden_seconds_total",
            "Seconds of the engine's host work per step (scheduling, output processing) while the executor ran a step (async scheduling hides them).",
            overlap.hidden_seconds,
        ),
        (
            "engine_host_exposed_seconds_total",
            "Seconds of the engine's host work per step while the executor had no step to run.",
            overlap.exposed_seconds,
        ),
    ] {
        out.header(name, help, "counter");
        out.sample(name, "", seconds);
    }
    if let Some(dropped) = exposition.kv_events_dropped {
        out.counter(
            "kv_events_dropped_batches",
            "KV-cache event batches dropped because the publisher lagged max_queue_size behind.",
            dropped,
        );
    }

    out.header("request_success_total", "Count of successfully processed requests.", "counter");
    for (model, counts) in &served {
        let finished = &counts.finished;
        for (reason, value) in [
            ("stop", finished.stop),
            ("length", finished.length),
            ("abort", finished.abort),
            ("error", finished.error),
        ] {
            out.sample_of(model, "request_success_total", &format!("finished_reason=\"{reason}\""), value);
        }
    }

    let histograms = [
        (
            "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            &metrics.time_to_first_token,
        ),
        (
            "inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            &metrics.inter_token_latency,
        ),
        (
            "time_per_output_token_seconds",
            "Histogram of time per output token in seconds (the name vLLM used before inter_token_latency_seconds).",
            &metrics.inter_token_latency,
        ),
        (
            "e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            &metrics.e2e_request_latency,
        ),
    ];
    for (name, help, histogram) in histograms {
        out.histogram(name, help, histogram);
    }

    let cache = exposition.cache;
    out.header("cache_config_info", "Information of the LLMEngine CacheConfig", "gauge");
    let _ = writeln!(
        out.out,
        "{}:cache_config_info{{block_size=\"{}\",enable_prefix_caching=\"{}\",num_cpu_blocks=\"None\",num_gpu_blocks=\"{}\",engine=\"0\"}} 1.0",
        out.prefix,
        cache.block_size,
        if cache.enable_prefix_caching { "True" } else { "False" },
        cache.num_gpu_blocks,
    );
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |elapsed| elapsed.as_secs_f64());
    // vLLM's gauge: the adapters as comma-separated labels, the value the time of the reading.
    let lora = exposition.lora;
    let max_lora = if lora.max_loras > 0 { lora.max_loras.to_string() } else { String::new() };
    out.header("lora_requests_info", "Running stats on lora requests.", "gauge");
    let _ = writeln!(
        out.out,
        "{}:lora_requests_info{{max_lora=\"{max_lora}\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"{}\"}} {now:?}",
        out.prefix,
        escape_label(&lora.running.join(",")),
        escape_label(&lora.waiting.join(",")),
    );
    out.out
}

/// The request counters by `model_name`: the base model's own first, then each adapter's.
fn served_counts<'a>(metrics: &'a EngineMetrics, model_name: &'a str) -> Vec<(&'a str, RequestCounts)> {
    let adapters = metrics.per_lora.iter().map(|(name, counts)| (name.as_str(), *counts));
    std::iter::once((model_name, metrics.base_counts())).chain(adapters).collect()
}

/// Speculative decoding's counters under vLLM's names, once anything was proposed; the
/// per-position series run to the last position that accepted a token.
fn render_spec_decoding(out: &mut Writer, spec: &SpecDecodingStats) {
    if spec.num_drafts == 0 {
        return;
    }
    out.counter("spec_decode_num_drafts", "Number of spec decoding drafts.", spec.num_drafts);
    out.counter("spec_decode_num_draft_tokens", "Number of draft tokens.", spec.num_draft_tokens);
    out.counter("spec_decode_num_accepted_tokens", "Number of accepted tokens.", spec.num_accepted_tokens);
    let name = "spec_decode_num_accepted_tokens_per_pos_total";
    out.header(name, "Accepted tokens per draft position.", "counter");
    let per_pos = &spec.num_accepted_tokens_per_pos;
    let positions = per_pos.iter().rposition(|&count| count > 0).map_or(1, |last| last + 1);
    for (position, count) in per_pos.iter().take(positions).enumerate() {
        out.sample(name, &format!("position=\"{position}\""), count);
    }
}

/// Appends series in the text format.
struct Writer {
    out: String,
    prefix: &'static str,
    labels: String,
}

impl Writer {
    fn header(&mut self, name: &str, help: &str, kind: &str) {
        let prefix = self.prefix;
        let _ = writeln!(self.out, "# HELP {prefix}:{name} {help}\n# TYPE {prefix}:{name} {kind}");
    }

    /// One sample with `extra` labels before the common ones.
    fn sample(&mut self, name: &str, extra: &str, value: impl std::fmt::Display) {
        let (prefix, labels) = (self.prefix, &self.labels);
        let separator = if extra.is_empty() { "" } else { "," };
        let _ = writeln!(self.out, "{prefix}:{name}{{{extra}{separator}{labels}}} {value}");
    }

    /// One sample labelled with `model` as its `model_name` (a LoRA adapter's series).
    fn sample_of(&mut self, model: &str, name: &str, extra: &str, value: impl std::fmt::Display) {
        let prefix = self.prefix;
        let separator = if extra.is_empty() { "" } else { "," };
        let model = escape_label(model);
        let _ = writeln!(
            self.out,
            "{prefix}:{name}{{{extra}{separator}model_name=\"{model}\",engine=\"0\"}} {value}"
        );
    }

    fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        self.sample(name, "", value);
    }

    fn counter(&mut self, name: &str, help: &str, value: u64) {
        let name = format!("{name}_total");
        self.header(&name, help, "counter");
        self.sample(&name, "", value);
    }

    fn histogram(&mut self, name: &str, help: &str, histogram: &Histogram) {
        self.header(name, help, "histogram");
        let bucket = format!("{name}_bucket");
        for (bound, count) in histogram.bounds.iter().zip(&histogram.cumulative_counts) {
            self.sample(&bucket, &format!("le=\"{bound:?}\""), count);
        }
        self.sample(&bucket, "le=\"+Inf\"", histogram.count);
        self.sample(&format!("{name}_sum"), "", histogram.sum);
        self.sample(&format!("{name}_count"), "", histogram.count);
    }
}

/// Escapes a Prometheus label value.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::request::FinishReason;

    fn exposition(prefix: MetricsPrefix) -> Exposition<'static> {
        Exposition {
            prefix,
            model_name: "m\"x",
            cache: CacheInfo { block_size: 16, num_gpu_blocks: 64, enable_prefix_caching: true },
            kv_events_dropped: Some(2),
            lora: &NO_LORA,
        }
    }

    static NO_LORA: LoraUsage = LoraUsage { max_loras: 0, running: Vec::new(), waiting: Vec::new() };

    #[test]
    fn lora_requests_info_names_the_adapters_as_vllm_does() {
        let usage = LoraUsage {
            max_loras: 2,
            running: vec!["chat".into(), "sql".into()],
            waiting: vec!["math".into()],
        };
        let text = render(
            &EngineMetrics::default(),
            &Exposition { lora: &usage, ..exposition(MetricsPrefix::Vllm) },
        );
        let line = text.lines().find(|l| l.starts_with("vllm:lora_requests_info{")).unwrap();
        let (labels, value) = line.split_once("} ").unwrap();
        assert_eq!(
            labels,
            "vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"chat,sql\",waiting_lora_adapters=\"math\""
        );
        assert!(value.parse::<f64>().unwrap() > 1.7e9, "{line}");
    }

    #[test]
    fn renders_the_host_tier_only_when_it_is_on() {
        let mut metrics = EngineMetrics::default();
        let off = render(&metrics, &exposition(MetricsPrefix::Vllm));
        assert!(!off.contains("external_prefix_cache"), "{off}");
        metrics.scheduler.host_tier = Some(HostTierStats {
            num_blocks: 8,
            num_used_blocks: 2,
            num_queried_blocks: 5,
            num_hit_blocks: 3,
            num_loaded_blocks: 3,
            num_stored_blocks: 4,
            load_bytes: 3072,
            ..HostTierStats::default()
        });
        let text = render(&metrics, &exposition(MetricsPrefix::Vllm));
        let label = "model_name=\"m\\\"x\",engine=\"0\"";
        for line in [
            format!("vllm:external_prefix_cache_queries_total{{{label}}} 80"),
            format!("vllm:external_prefix_cache_hits_total{{{label}}} 48"),
            format!("vllm:kv_offload_usage_perc{{{label}}} 0.25"),
            format!("vllm:kv_offload_loaded_blocks_total{{{label}}} 3"),
            format!("vllm:kv_offload_stored_blocks_total{{{label}}} 4"),
            format!("vllm:kv_offload_loaded_bytes_total{{{label}}} 3072"),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn renders_vllm_compatible_series() {
        let mut metrics = EngineMetrics { prompt_tokens: 12, ..EngineMetrics::default() };
        metrics.scheduler.num_preemptions = 3;
        metrics.scheduler.kv_cache_usage = 0.25;
        metrics.time_to_first_token.observe(0.003);
        let text = render(&metrics, &exposition(MetricsPrefix::Pagoda));
        let label = "model_name=\"m\\\"x\",engine=\"0\"";
        for line in [
            "# TYPE pagoda:prompt_tokens_total counter".to_owned(),
            format!("pagoda:prompt_tokens_total{{{label}}} 12"),
            format!("pagoda:num_preemptions_total{{{label}}} 3"),
            format!("pagoda:kv_cache_usage_perc{{{label}}} 0.25"),
            format!("pagoda:kv_events_dropped_batches_total{{{label}}} 2"),
            format!("pagoda:time_to_first_token_seconds_bucket{{le=\"0.001\",{label}}} 0"),
            format!("pagoda:time_to_first_token_seconds_bucket{{le=\"0.005\",{label}}} 1"),
            format!("pagoda:time_to_first_token_seconds_bucket{{le=\"+Inf\",{label}}} 1"),
            format!("pagoda:time_to_first_token_seconds_count{{{label}}} 1"),
            format!("pagoda:request_success_total{{finished_reason=\"stop\",{label}}} 0"),
            "pagoda:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",num_cpu_blocks=\"None\",num_gpu_blocks=\"64\",engine=\"0\"} 1.0".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line} in\n{text}");
        }
    }

    #[test]
    fn request_counters_are_split_by_model_name_between_the_base_and_each_adapter() {
        let mut metrics = EngineMetrics::default();
        metrics.record_prompt(None, 4);
        metrics.record_prompt(Some("sql"), 6);
        metrics.record_generation(Some("sql"), 3);
        metrics.record_finish(Some("sql"), FinishReason::Length);
        metrics.record_finish(None, FinishReason::Stop);
        let text = render(&metrics, &exposition(MetricsPrefix::Vllm));
        let (base, sql) = ("model_name=\"m\\\"x\",engine=\"0\"", "model_name=\"sql\",engine=\"0\"");
        for line in [
            format!("vllm:prompt_tokens_total{{{base}}} 4"),
            format!("vllm:prompt_tokens_total{{{sql}}} 6"),
            format!("vllm:generation_tokens_total{{{base}}} 0"),
            format!("vllm:generation_tokens_total{{{sql}}} 3"),
            format!("vllm:request_success_total{{finished_reason=\"stop\",{base}}} 1"),
            format!("vllm:request_success_total{{finished_reason=\"length\",{base}}} 0"),
            format!("vllm:request_success_total{{finished_reason=\"length\",{sql}}} 1"),
            format!("vllm:request_success_total{{finished_reason=\"stop\",{sql}}} 0"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert_eq!(text.matches("# TYPE vllm:prompt_tokens_total counter").count(), 1);
    }

    #[test]
    fn speculative_decoding_counters_appear_once_anything_was_proposed() {
        let mut metrics = EngineMetrics::default();
        assert!(!render(&metrics, &exposition(MetricsPrefix::Vllm)).contains("spec_decode"));
        metrics.scheduler.spec_decoding.record(4, 2);
        metrics.scheduler.spec_decoding.record(4, 0);
        let text = render(&metrics, &exposition(MetricsPrefix::Vllm));
        let labels = r#"model_name="m\"x",engine="0""#;
        for line in [
            format!("vllm:spec_decode_num_drafts_total{{{labels}}} 2"),
            format!("vllm:spec_decode_num_draft_tokens_total{{{labels}}} 8"),
            format!("vllm:spec_decode_num_accepted_tokens_total{{{labels}}} 2"),
            format!("vllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"0\",{labels}}} 1"),
            format!("vllm:spec_decode_num_accepted_tokens_per_pos_total{{position=\"1\",{labels}}} 1"),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("position=\"2\""));
    }

    #[test]
    fn vllm_prefix_names_every_series_as_vllm_does() {
        let text = render(&EngineMetrics::default(), &exposition(MetricsPrefix::Vllm));
        assert!(text.lines().filter(|l| !l.starts_with('#')).all(|l| l.starts_with("vllm:")));
        let lora = text.lines().find(|l| l.starts_with("vllm:lora_requests_info{")).unwrap();
        let (labels, value) = lora.split_once("} ").unwrap();
        assert_eq!(
            labels,
            "vllm:lora_requests_info{max_lora=\"\",running_lora_adapters=\"\",waiting_lora_adapters=\"\""
        );
        assert!(value.parse::<f64>().unwrap() > 1.7e9);
    }
}
