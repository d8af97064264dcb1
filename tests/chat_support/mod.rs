//! A chat template alone: minijinja configured as transformers renders chat templates (what
//! `ChatTemplate` was before its memory budget and polyfills), for the tests to compare with.

use minijinja::{Environment, ErrorKind};

/// The time the tests fix `ChatTemplate`'s clock at (2026-01-15T12:00:00Z), which `plain`'s
/// `strftime_now` renders.
pub const PLAIN_NOW: i64 = 1_768_478_400;

/// `PLAIN_NOW` in the formats the real templates ask `strftime_now` for (Python's output).
fn plain_strftime_now(format: String) -> Result<String, minijinja::Error> {
    match format.as_str() {
        "%Y-%m-%d" => Ok("2026-01-15".into()),
        "%d %b %Y" => Ok("15 Jan 2026".into()),
        "%B %d, %Y" => Ok("January 15, 2026".into()),
        _ => Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("no fixed date for {format}"))),
    }
}

/// An environment holding `source` as the template `chat`.
pub fn plain(source: &str) -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_function("strftime_now", plain_strftime_now);
    env.add_template_owned("chat", source.to_owned())?;
    Ok(env)
}
