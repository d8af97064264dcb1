//! The CLI reference: every subcommand's `--help`, as clap prints it.

use std::fmt::Write;
use std::path::Path;
use std::process::Command;

/// `pagoda`'s output for `args`, with no environment (clap shows the value of a flag's
/// environment variable in its help) and no terminal (no colours, no wrapping).
fn help(pagoda: &Path, args: &[&str]) -> String {
    let out = Command::new(pagoda).args(args).env_clear().output().expect("run pagoda");
    assert!(out.status.success(), "pagoda {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("help is UTF-8")
}

/// The subcommands `pagoda --help` lists under `Commands:`, `help` aside.
fn subcommands(top_help: &str) -> Vec<String> {
    top_help
        .lines()
        .skip_while(|line| *line != "Commands:")
        .skip(1)
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// The page: the top-level help, then one section per subcommand.
pub fn page(pagoda: &Path) -> String {
    let top = help(pagoda, &["--help"]);
    let mut page = format!(
        "# CLI reference\n\n{}\n\nEvery subcommand's `--help`, as `pagoda` prints it. The [CLI guide](../cli.md) \
         explains them with examples.\n\n```text\n{top}```\n",
        super::GENERATED
    );
    for name in subcommands(&top) {
        let text = help(pagoda, &[name.as_str(), "--help"]);
        let _ = write!(page, "\n## `pagoda {name}`\n\n```text\n{text}```\n");
    }
    page
}
