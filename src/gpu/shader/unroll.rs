//! The `GATED` / `PAIRED` / `PLAIN` and `ROWS` / `COLS` / `PAIRS` line markers of the linear
//! kernels (see the [`shader`](super) docs for an example of their expansion), and the
//! `HEAD_PAIRS` / `HEAD_EIGHTS` / `LANE_PAIRS` / `GROUP_HEADS` markers of the attention kernels.

/// How a linear kernel hands its outputs to the epilogue (which of the kernels' `PLAIN`,
/// `GATED` and `PAIRED` lines the composer keeps).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EmitShape {
    /// One output at a time (`emit`).
    Single,
    /// A gate and an up sum per output (`emit_gated`).
    Gated,
    /// Two neighbouring columns at once (`emit_pair`).
    Pairs,
}

/// Keeps the lines starting with the word `GATED` (without it) for a gated epilogue, those
/// starting with `PAIRED` for an epilogue of column pairs, those starting with `PLAIN` for the
/// others, and drops the rest of the three kinds; other lines stay as they are.
pub(super) fn select_epilogue(src: &str, shape: EmitShape) -> String {
    map_lines(src, |trimmed| {
        let marked =
            [("GATED ", EmitShape::Gated), ("PAIRED ", EmitShape::Pairs), ("PLAIN ", EmitShape::Single)]
                .into_iter()
                .find_map(|(marker, kind)| trimmed.strip_prefix(marker).map(|text| (kind == shape, text)));
        let (keep, text) = marked.unwrap_or((true, trimmed));
        if keep { vec![text.to_string()] } else { Vec::new() }
    })
}

/// Expands every line starting with the word `ROWS` into one copy of the rest of the line per
/// row `0..rows` (`RR` and the identifier suffix `_R` become the row number), and every line
/// (or expanded row) starting with the word `COLS` into one copy per column `0..cols` (`CC`
/// and `_C` become the column number), or starting with `PAIRS` into one copy per column pair
/// (`CC` and `_C` the pair's first column, `DD` and `_D` its second). Other lines are kept as
/// they are.
pub(super) fn unroll(src: &str, rows: u32, cols: u32) -> String {
    map_lines(src, |trimmed| {
        expand(trimmed, "ROWS ", "RR", "_R", rows)
            .iter()
            .flat_map(|row_text| expand(row_text, "COLS ", "CC", "_C", cols))
            .flat_map(|col_text| expand_pairs(&col_text, cols))
            .collect()
    })
}

/// Expands the attention kernels' loops over a head's `pairs` dimension pairs and over the
/// `group` query heads computed together, written out: every line starting with the word
/// `HEAD_PAIRS` into one copy per pair `0..pairs`, `HEAD_EIGHTS` into one per group of eight
/// pairs (`PP` becomes the pair, or the group's first pair), `LANE_PAIRS` into one per pair a
/// lane of `lanes` holds (`PP` becomes its index `0..pairs / lanes`, rounded up), and
/// `GROUP_HEADS` into one per head `0..group` (`HH` becomes the head); the markers nest, the
/// outer first. Lavapipe ends every loop of a shader invocation once their iterations together
/// pass 65,535: a loop over the head inside the walk over the keys, which its compiler does not
/// unroll past 32 trips, would cost its trip count at every key and cut a walk of a few
/// hundred keys short. Other lines are kept as they are.
pub(super) fn unroll_head(src: &str, pairs: u32, lanes: u32, group: u32) -> String {
    let markers = [
        ("HEAD_PAIRS ", "PP", 1, pairs),
        ("HEAD_EIGHTS ", "PP", 8, pairs.div_ceil(8)),
        ("LANE_PAIRS ", "PP", 1, pairs.div_ceil(lanes)),
        ("GROUP_HEADS ", "HH", 1, group),
    ];
    map_lines(src, |trimmed| expand_markers(trimmed, &markers))
}

/// `src` with each line replaced by the lines `expand` makes of its text without the indent,
/// each given the line's indent.
fn map_lines(src: &str, expand: impl Fn(&str) -> Vec<String>) -> String {
    let mut out = String::with_capacity(src.len() * 2);
    for line in src.lines() {
        let trimmed = line.trim_start();
        let indent = &line[..line.len() - trimmed.len()];
        for text in expand(trimmed) {
            out.push_str(indent);
            out.push_str(&text);
            out.push('\n');
        }
    }
    out
}

/// `text` with its leading markers expanded, outermost first: one copy per index of the
/// marker's count, `token` replaced by index × step.
fn expand_markers(text: &str, markers: &[(&str, &str, u32, u32)]) -> Vec<String> {
    let found = markers.iter().find_map(|&(marker, token, step, count)| {
        text.strip_prefix(marker).map(|body| (body, token, step, count))
    });
    match found {
        Some((body, token, step, count)) => (0..count)
            .flat_map(|i| expand_markers(&body.replace(token, &(i * step).to_string()), markers))
            .collect(),
        None => vec![text.to_string()],
    }
}

/// `text` unchanged when it does not start with `PAIRS`; otherwise one copy of the text after
/// it per column pair `(2p, 2p + 1)` of `0..cols`.
fn expand_pairs(text: &str, cols: u32) -> Vec<String> {
    match text.strip_prefix("PAIRS ") {
        Some(body) => (0..cols / 2)
            .map(|p| {
                let (first, second) = (2 * p, 2 * p + 1);
                body.replace("CC", &first.to_string())
                    .replace("_C", &format!("_{first}"))
                    .replace("DD", &second.to_string())
                    .replace("_D", &format!("_{second}"))
            })
            .collect(),
        None => vec![text.to_string()],
    }
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
    use super::{EmitShape, select_epilogue, unroll, unroll_head};

    #[test]
    fn gated_paired_and_plain_lines() {
        let src =
            "  GATED ROWS var up_R = 0.0;\n  PLAIN emit(acc);\n  PAIRED emit_pair(a, b);\nlet n = 0u;\n";
        assert_eq!(select_epilogue(src, EmitShape::Gated), "  ROWS var up_R = 0.0;\nlet n = 0u;\n");
        assert_eq!(select_epilogue(src, EmitShape::Single), "  emit(acc);\nlet n = 0u;\n");
        assert_eq!(select_epilogue(src, EmitShape::Pairs), "  emit_pair(a, b);\nlet n = 0u;\n");
    }

    #[test]
    fn rows_then_column_pairs() {
        let src = "ROWS PAIRS emit_pair(RRu, CCu, DDu, acc_R_C, acc_R_D);\n";
        let expected = "emit_pair(0u, 0u, 1u, acc_0_0, acc_0_1);\nemit_pair(0u, 2u, 3u, acc_0_2, acc_0_3);\n\
                        emit_pair(1u, 0u, 1u, acc_1_0, acc_1_1);\nemit_pair(1u, 2u, 3u, acc_1_2, acc_1_3);\n";
        assert_eq!(unroll(src, 2, 4), expected);
    }

    #[test]
    fn rows_then_columns() {
        let src = "    ROWS COLS var acc_R_C = 0.0;\n    ROWS let xr_R = x_row(m0, RRu);\nlet n = 0u;\n";
        let expected = "    var acc_0_0 = 0.0;\n    var acc_0_1 = 0.0;\n    var acc_1_0 = 0.0;\n    \
                        var acc_1_1 = 0.0;\n    let xr_0 = x_row(m0, 0u);\n    let xr_1 = x_row(m0, 1u);\n\
                        let n = 0u;\n";
        assert_eq!(unroll(src, 2, 2), expected);
    }

    #[test]
    fn head_pairs_eights_and_lane_pairs() {
        let src = "  HEAD_PAIRS a[PPu] = v(PPu);\n  HEAD_EIGHTS s = f(PPu, PPu + 1u);\n  LANE_PAIRS l(PPu);\nlet n = 0u;\n";
        let expected = "  a[0u] = v(0u);\n  a[1u] = v(1u);\n  a[2u] = v(2u);\n  a[3u] = v(3u);\n  a[4u] = v(4u);\n  \
                        a[5u] = v(5u);\n  a[6u] = v(6u);\n  a[7u] = v(7u);\n  a[8u] = v(8u);\n  \
                        s = f(0u, 0u + 1u);\n  s = f(8u, 8u + 1u);\n  l(0u);\n  l(1u);\nlet n = 0u;\n";
        assert_eq!(unroll_head(src, 9, 8, 1), expected);
    }

    #[test]
    fn group_heads_nest_around_lane_pairs() {
        let src = "GROUP_HEADS var part_HH = 0.0;\n  GROUP_HEADS LANE_PAIRS p_HH = f(q[HHu][PPu]);\n";
        let expected = "var part_0 = 0.0;\nvar part_1 = 0.0;\n  p_0 = f(q[0u][0u]);\n  p_0 = f(q[0u][1u]);\n  \
                        p_1 = f(q[1u][0u]);\n  p_1 = f(q[1u][1u]);\n";
        assert_eq!(unroll_head(src, 16, 8, 2), expected);
    }
}
