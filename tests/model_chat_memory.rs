//! What a chat template's rendering really allocates, counted by a global allocator:
//! templates that try to make gigabytes (doubling strings, huge widths, joins of lists of
//! big strings, text captured in loops, copies kept alive) stop with `MemoryLimit`, and
//! at their peak held no more than the budget and one value over it.

#[path = "fuzz_support/alloc.rs"]
mod alloc;

use alloc::Counting;
use pagoda::model::chat::{
    ChatError, ChatMessage, ChatTemplate, MAX_RENDERED_BYTES, TEMPLATE_ALLOCATION_LIMIT,
};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Renders `source` for one user message; its outcome and peak heap growth.
fn render(source: &str) -> (Result<usize, ChatError>, usize) {
    let baseline = alloc::start(0);
    let outcome = ChatTemplate::new(source, "", "")
        .and_then(|t| t.render(&[ChatMessage::new("user", "hi")], false))
        .map(|s| s.len());
    (outcome, alloc::finish(baseline).0)
}

#[test]
fn templates_that_would_make_gigabytes_stop_within_the_budget() {
    let start = "{% set ns = namespace(s='x' * 1048576, l=[1]) %}";
    let loop_of = |body: &str| format!("{start}{{% for i in range(100000) %}}{body}{{% endfor %}}");
    let attacks = [
        loop_of("{% set ns.s = ns.s ~ ns.s %}"),
        loop_of("{% set ns.s = ns.s|replace('x', 'xx') %}"),
        loop_of("{% set ns.l = ns.l + [ns.s|upper] %}"),
        loop_of("{% set ns.l = ns.l + [ns.s[1:]] %}"),
        loop_of("{% set ns.l = ns.l + ns.l %}"),
        loop_of("{% set ns.s %}{{ ns.s }}{{ ns.s }}{% endset %}"),
        format!(
            "{start}{{% set s %}}{{% for i in range(100000) %}}{}{{% endfor %}}{{% endset %}}",
            "t".repeat(1000)
        ),
        format!(
            "{start}{{% macro d(x) %}}{{{{ x }}}}{{{{ x }}}}{{% endmacro %}}{{% for i in range(30) %}}{{% set ns.s = d(ns.s) %}}{{% endfor %}}"
        ),
        format!("{start}{{{{ ([ns.s] * 10000)|join }}}}"),
        format!("{start}{{{{ ([ns.s] * 10000)|tojson(indent=4) }}}}"),
        format!("{start}{{{{ 'a\\nb'|indent(width=10**10) }}}}"),
        format!("{start}{{{{ ('x' * 99999999) ~ ('x' * 99999999) }}}}"),
    ];
    let most = TEMPLATE_ALLOCATION_LIMIT + 3 * MAX_RENDERED_BYTES;
    for attack in &attacks {
        let (outcome, peak) = render(attack);
        println!(
            "{peak:>10} bytes at the peak: {outcome:?} for {}",
            &attack[start.len()..attack.len().min(start.len() + 70)]
        );
        assert!(matches!(outcome, Err(ChatError::MemoryLimit)), "{attack}: {outcome:?}");
        assert!(peak <= most, "{attack}: {peak} bytes at the peak");
    }
}
