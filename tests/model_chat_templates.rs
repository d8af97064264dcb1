//! Real chat templates (the ones llama.cpp tests with; `scripts/chat-templates.sh` puts
//! them in the directory `PAGODA_CHAT_TEMPLATES` names) render exactly as plain minijinja
//! renders them, configured as transformers renders them, on short conversations and on a
//! 4 MiB one (the server's default body limit): the memory budget changes no output. (A
//! conversation that needs a polyfill is left to tests/model_chat_polyfill.rs.)

use std::path::PathBuf;

mod chat_support;

use chat_support::{PLAIN_NOW, plain};
use minijinja::Environment;
use pagoda::ChatMessage;
use pagoda::model::chat::ChatTemplate;

fn plain_render(
    env: &Environment<'_>,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Option<String> {
    let ctx = minijinja::context! {
        messages => messages,
        add_generation_prompt => add_generation_prompt,
        bos_token => "<s>",
        eos_token => "</s>",
    };
    env.get_template("chat").ok()?.render(ctx).ok()
}

fn conversations() -> Vec<Vec<ChatMessage>> {
    let long = "the river of stone and light carries a quiet song over seven hills ".repeat(300);
    let mut big = vec![ChatMessage::new("system", "You are terse.")];
    while big.iter().map(|m| m.content.len()).sum::<usize>() < 4 << 20 {
        big.push(ChatMessage::new("user", long.as_str()));
        big.push(ChatMessage::new("assistant", long.as_str()));
    }
    big.push(ChatMessage::new("user", "and then?"));
    vec![
        vec![ChatMessage::new("user", "Hello!")],
        vec![ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "Hi  \n there")],
        vec![
            ChatMessage::new("user", "1 + 1?"),
            ChatMessage::new("assistant", " 2 "),
            ChatMessage::new("user", "and \"<b>\" & 'x'?"),
        ],
        big,
    ]
}

#[test]
fn real_chat_templates_render_as_plain_minijinja_renders_them() {
    let dir = PathBuf::from(
        std::env::var_os("PAGODA_CHAT_TEMPLATES")
            .expect("PAGODA_CHAT_TEMPLATES names the directory scripts/chat-templates.sh prints"),
    );
    let mut paths: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "jinja"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 50, "{} templates in {}", paths.len(), dir.display());
    let conversations = conversations();
    let (mut rendered, mut failures) = (0, Vec::new());
    for path in &paths {
        let source = std::fs::read_to_string(path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy();
        let Ok(env) = plain(&source) else {
            continue;
        };
        let template = match ChatTemplate::new(&source, "<s>", "</s>") {
            Ok(template) => {
                template.fix_clock(PLAIN_NOW);
                template
            }
            Err(error) => {
                failures.push(format!("{name}: {error}"));
                continue;
            }
        };
        for messages in &conversations {
            // A system turn the template refuses or drops is polyfilled: tests/model_chat_polyfill.rs.
            if messages[0].role == "system" && !template.capabilities().system_role {
                continue;
            }
            for add_generation_prompt in [false, true] {
                let expected = plain_render(&env, messages, add_generation_prompt);
                let got = template.render(messages, add_generation_prompt);
                match (&expected, &got) {
                    (Some(expected), Ok(got)) if expected == got => rendered += 1,
                    (None, Err(_)) => {}
                    _ => failures.push(format!(
                        "{name} ({} messages, {add_generation_prompt}): plain {}, bounded {:?}",
                        messages.len(),
                        expected.as_ref().map_or("an error".into(), |s| format!("{} bytes", s.len())),
                        got.map(|s| s.len())
                    )),
                }
            }
        }
    }
    println!("{rendered} renderings of {} templates matched", paths.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(rendered >= 200, "only {rendered} renderings succeeded");
}
