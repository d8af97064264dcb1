//! `/metrics` in the Prometheus text format, named as vLLM names its metrics (with a
//! `pagoda:` prefix where vLLM has `vllm:`), so dashboards built for vLLM read them.

use std::fmt::Write;

use crate::engine::metrics::{EngineMetrics, Histogram};

/// The Prometheus exposition of `metrics`, every series labelled with `model_name`.
pub fn render(metrics: &EngineMetrics, model_name: &str) -> String {
    let label = format!("model_name=\"{}\"", escape_label(model_name));
    let scheduler = &metrics.scheduler;
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP pagoda:{name} {help}\n# TYPE pagoda:{name} gauge\npagoda:{name}{{{label}}} {value}"
        );
    };
    gauge(
        "num_requests_running",
        "Number of requests in model execution batches.",
        scheduler.num_running as f64,
    );
    gauge(
        "num_requests_waiting",
        "Number of requests waiting to be processed.",
        scheduler.num_waiting as f64,
    );
    gauge("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", scheduler.kv_cache_usage);

    let counters = [
        (
            "prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            scheduler.prefix_cache.queries,
        ),
        (
            "prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            scheduler.prefix_cache.hits,
        ),
        ("num_preemptions", "Cumulative number of preemptions from the engine.", scheduler.num_preemptions),
        (
            "num_recomputed_tokens",
            "Tokens computed again after preemption or invalid blocks.",
            scheduler.num_recomputed_tokens,
        ),
        ("prompt_tokens", "Number of prefill tokens processed.", metrics.prompt_tokens),
        ("generation_tokens", "Number of generation tokens processed.", metrics.generation_tokens),
    ];
    for (name, help, value) in counters {
        let _ = writeln!(
            out,
            "# HELP pagoda:{name}_total {help}\n# TYPE pagoda:{name}_total counter\npagoda:{name}_total{{{label}}} {value}"
        );
    }

    let _ = writeln!(
        out,
        "# HELP pagoda:request_success_total Count of successfully processed requests.\n# TYPE pagoda:request_success_total counter"
    );
    let finished = &metrics.finished;
    for (reason, value) in [
        ("stop", finished.stop),
        ("length", finished.length),
        ("abort", finished.abort),
        ("error", finished.error),
    ] {
        let _ = writeln!(out, "pagoda:request_success_total{{finished_reason=\"{reason}\",{label}}} {value}");
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
            "e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            &metrics.e2e_request_latency,
        ),
    ];
    for (name, help, histogram) in histograms {
        write_histogram(&mut out, name, help, histogram, &label);
    }
    out
}

fn write_histogram(out: &mut String, name: &str, help: &str, histogram: &Histogram, label: &str) {
    let _ = writeln!(out, "# HELP pagoda:{name} {help}\n# TYPE pagoda:{name} histogram");
    for (bound, count) in histogram.bounds.iter().zip(&histogram.cumulative_counts) {
        let _ = writeln!(out, "pagoda:{name}_bucket{{le=\"{bound:?}\",{label}}} {count}");
    }
    let _ = writeln!(out, "pagoda:{name}_bucket{{le=\"+Inf\",{label}}} {}", histogram.count);
    let _ = writeln!(out, "pagoda:{name}_sum{{{label}}} {}", histogram.sum);
    let _ = writeln!(out, "pagoda:{name}_count{{{label}}} {}", histogram.count);
}

/// Escapes a Prometheus label value.
fn escape_label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_vllm_compatible_series() {
        let mut metrics = EngineMetrics { prompt_tokens: 12, ..EngineMetrics::default() };
        metrics.scheduler.num_preemptions = 3;
        metrics.scheduler.kv_cache_usage = 0.25;
        metrics.time_to_first_token.observe(0.003);
        let text = render(&metrics, "m\"x");
        let label = "model_name=\"m\\\"x\"";
        assert!(text.contains(&format!("pagoda:prompt_tokens_total{{{label}}} 12\n")));
        assert!(text.contains(&format!("pagoda:num_preemptions_total{{{label}}} 3\n")));
        assert!(text.contains(&format!("pagoda:kv_cache_usage_perc{{{label}}} 0.25\n")));
        assert!(
            text.contains(&format!("pagoda:time_to_first_token_seconds_bucket{{le=\"0.001\",{label}}} 0\n"))
        );
        assert!(
            text.contains(&format!("pagoda:time_to_first_token_seconds_bucket{{le=\"0.005\",{label}}} 1\n"))
        );
        assert!(
            text.contains(&format!("pagoda:time_to_first_token_seconds_bucket{{le=\"+Inf\",{label}}} 1\n"))
        );
        assert!(text.contains(&format!("pagoda:time_to_first_token_seconds_count{{{label}}} 1\n")));
        assert!(
            text.contains(&format!("pagoda:request_success_total{{finished_reason=\"stop\",{label}}} 0\n"))
        );
    }
}
