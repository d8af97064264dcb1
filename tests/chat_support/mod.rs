//! A chat template alone: minijinja configured as transformers renders chat templates (what
//! `ChatTemplate` was before its memory budget and polyfills), for the tests to compare with.

use minijinja::{Environment, ErrorKind};

/// An environment holding `source` as the template `chat`.
pub fn plain(source: &str) -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function("raise_exception", |message: String| -> Result<String, minijinja::Error> {
        Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
    });
    env.add_template_owned("chat", source.to_owned())?;
    Ok(env)
}
