//! Templates that nest values without bound (a namespace that holds itself, a list wrapped
//! in a list in every loop iteration) stop with a typed error: displaying, serializing,
//! comparing or dropping such a value would recurse once a level and overflow the stack.
//! Each renders on a thread with a 2 MiB stack, so that a regression aborts the test.

use pagoda::model::chat::{ChatError, ChatMessage, ChatTemplate};

/// Renders `source` for one user message on a thread with a small stack.
fn render(source: &str) -> Result<String, ChatError> {
    let source = source.to_owned();
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || ChatTemplate::new(&source, "", "")?.render(&[ChatMessage::new("user", "hi")], false))
        .unwrap()
        .join()
        .unwrap()
}

fn assert_too_deep(name: &str, source: &str) {
    let rendered = render(source).map(|s| s.len());
    assert!(matches!(rendered, Err(ChatError::TooDeep)), "{name}: {rendered:?}");
}

#[test]
fn a_namespace_may_not_hold_itself_or_another_namespace() {
    let ns = "{% set ns = namespace(l=[]) %}{% set other = namespace() %}";
    let attacks = [
        ("itself", "{% set ns.x = ns %}{{ ns }}"),
        ("itself, serialized", "{% set ns.x = ns %}{{ ns|tojson }}"),
        ("itself in a list", "{% set ns.x = [1, [ns]] %}{{ ns }}"),
        ("itself in a map", "{% set ns.x = {'a': ns} %}{{ ns == ns }}"),
        ("itself in a tuple", "{% set ns.x, ns.y = 1, ns %}{{ ns }}"),
        ("itself in a dict", "{% set ns.x = dict(a=ns) %}{{ ns }}"),
        ("each other", "{% set ns.x = other %}{% set other.x = ns %}{{ ns }}"),
        ("another at creation", "{% set third = namespace(x=ns) %}{{ third }}"),
        (
            "a chain",
            "{% for i in range(100000) %}{% set n = namespace() %}{% set n.next = ns.l %}{% set ns.l = n %}{% endfor %}{{ ns.l }}",
        ),
        (
            "a chain of macros",
            "{% for i in range(100000) %}{% set prev = ns.l %}{% macro m() %}{{ prev }}{% endmacro %}{% set ns.l = m %}{% endfor %}",
        ),
    ];
    for (name, attack) in attacks {
        assert_too_deep(name, &format!("{ns}{attack}"));
    }
}

#[test]
fn values_may_not_nest_without_bound() {
    let ns = "{% set ns = namespace(l=[], d={}) %}";
    let looped =
        |body: &str, then: &str| format!("{ns}{{% for i in range(100000) %}}{body}{{% endfor %}}{then}");
    let set_again = |body: &str, then: &str| format!("{ns}{{% set l = [] %}}{}{then}", body.repeat(5000));
    let attacks = [
        ("a list in a list", looped("{% set ns.l = [ns.l, i] %}", "{{ ns.l }}")),
        ("serialized", looped("{% set ns.l = [ns.l, i] %}", "{{ ns.l|tojson }}")),
        ("compared", looped("{% set ns.l = [ns.l, i] %}", "{{ ns.l == ns.l }}")),
        ("dropped", looped("{% set ns.l = [ns.l, i] %}", "")),
        ("a tuple", looped("{% set ns.l = (ns.l, i) %}", "{{ ns.l }}")),
        ("a bare tuple", looped("{% set ns.l = ns.l, i %}", "{{ ns.l }}")),
        ("repeated", looped("{% set ns.l = [ns.l] * 1 %}", "{{ ns.l }}")),
        ("concatenated", looped("{% set ns.l = [ns.l] + [] %}", "{{ ns.l }}")),
        ("a map in a map", looped("{% set ns.d = {'a': ns.d} %}", "{{ ns.d }}")),
        ("a map key", looped("{% set ns.d = {(ns.d, 1): 1} %}", "{{ ns.d }}")),
        ("dict", looped("{% set ns.d = dict(a=ns.d) %}", "{{ ns.d }}")),
        (
            "batch",
            looped("{% set ns.l = [1]|batch(1)|list if not ns.l else ns.l|batch(1)|list %}", "{{ ns.l }}"),
        ),
        ("items", looped("{% set ns.d = {'a': ns.d}.items()|list %}", "{{ ns.d }}")),
        ("zip", looped("{% set ns.l = [ns.l]|zip([1])|list %}", "{{ ns.l }}")),
        ("set again", set_again("{% set l = [l] %}", "{{ l }}")),
        ("set again, bare tuples", set_again("{% set l = l, 1 %}", "{{ l }}")),
        ("set again, batch", set_again("{% set l = (l or [1])|batch(1)|list %}", "{{ l }}")),
        ("set again, dropped", set_again("{% set l = [l] %}", "")),
        (
            "macro recursion",
            format!(
                "{{% macro f(n, l) %}}{{% if n > 0 %}}{{{{ f(n - 1, {}l{}) }}}}{{% else %}}{{{{ l }}}}{{% endif %}}{{% endmacro %}}{{{{ f(60, []) }}}}",
                "[".repeat(20),
                "]".repeat(20)
            ),
        ),
    ];
    for (name, attack) in &attacks {
        assert_too_deep(name, attack);
    }
}

#[test]
fn values_a_few_levels_deep_render() {
    let source = "{% set ns = namespace(l=[], found=false) %}{% for m in messages %}{% set ns.l = ns.l + [{'role': m.role, 'parts': [[m.content]]}] %}{% set ns.found = true %}{% endfor %}{{ ns.l|tojson }}{{ dict(a=[[1]]) }}{% set t = 1, [2] %}{{ t }}";
    assert_eq!(render(source).unwrap(), r#"[{"parts":[["hi"]],"role":"user"}]{"a": [[1]]}[1, [2]]"#);
}
