//! The `GATED` / `PLAIN` and `ROWS` / `COLS` line markers of the linear kernels (see the
//! [`shader`](super) docs for an example of their expansion).

/// Keeps the lines starting with the word `GATED` (without it) when `gated` and drops them
/// otherwise, and the reverse for lines starting with `PLAIN`; other lines stay as they are.
pub(super) fn select_gated(src: &str, gated: bool) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        let (keep, text) = match (trimmed.strip_prefix("GATED "), trimmed.strip_prefix("PLAIN ")) {
            (Some(text), _) => (gated, text),
            (_, Some(text)) => (!gated, text),
            _ => (true, trimmed),
        };
        if keep {
            out.push_str(indent);
            out.push_str(text);
            out.push('\n');
        }
    }
    out
}

/// Expands every line starting with the word `ROWS` into one copy of the rest of the line per
/// row `0..rows` (`RR` and the identifier suffix `_R` become the row number), and every line
/// (or expanded row) starting with the word `COLS` into one copy per column `0..cols` (`CC`
/// and `_C` become the column number). Other lines are kept as they are.
pub(super) fn unroll(src: &str, rows: u32, cols: u32) -> String {
    let mut out = String::with_capacity(src.len() * 2);
    for line in src.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        for row_text in expand(trimmed, "ROWS ", "RR", "_R", rows) {
            for text in expand(&row_text, "COLS ", "CC", "_C", cols) {
                out.push_str(indent);
                out.push_str(&text);
                out.push('\n');
            }
        }
    }
    out
}

/// `text` unchanged when it does not start with `marker`; otherwise one copy of the text after
/// the marker per index `0..count`, with `number` and `suffix` replaced by the index.
fn expand(text: &str, marker: &str, number: &str, suffix: &str, count: u32) -> Vec<String> {
    match text.strip_prefix(marker) {
        Some(body) => (0..count)
            .map(|i| body.replace(number, &i.to_string()).replace(suffix, &format!("_{i}")))
            .collect(),
        None => vec![text.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::{select_gated, unroll};

    #[test]
    fn gated_and_plain_lines() {
        let src = "  GATED ROWS var up_R = 0.0;\n  PLAIN emit(acc);\nlet n = 0u;\n";
        assert_eq!(select_gated(src, true), "  ROWS var up_R = 0.0;\nlet n = 0u;\n");
        assert_eq!(select_gated(src, false), "  emit(acc);\nlet n = 0u;\n");
    }

    #[test]
    fn rows_then_columns() {
        let src = "    ROWS COLS var acc_R_C = 0.0;\n    ROWS let xr_R = x_row(m0, RRu);\nlet n = 0u;\n";
        let expected = "    var acc_0_0 = 0.0;\n    var acc_0_1 = 0.0;\n    var acc_1_0 = 0.0;\n    \
                        var acc_1_1 = 0.0;\n    let xr_0 = x_row(m0, 0u);\n    let xr_1 = x_row(m0, 1u);\n\
                        let n = 0u;\n";
        assert_eq!(unroll(src, 2, 2), expected);
    }
}
