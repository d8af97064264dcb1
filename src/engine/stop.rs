//! Stop strings: found exactly, also across tokens, and never streamed unless asked for.

/// Where a request's output text stands against its stop strings.
///
/// The caller appends each step's new text with [`StopStrings::append`], which returns the
/// text safe to emit now: while the end of the output could still be the start of a stop
/// string, that tail is held back (unless the stop string is to be included anyway).
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    stops: Vec<String>,
    include_in_output: bool,
    text: String,
    emitted: usize,
    matched: Option<usize>,
}

impl StopStrings {
    /// A matcher for `stops`; with `include_in_output` the matched string stays in the text.
    pub fn new(stops: Vec<String>, include_in_output: bool) -> Self {
        Self { stops, include_in_output, ..Self::default() }
    }

    /// Appends `new_text` (when `check` is false, stop strings are not looked for, e.g.
    /// before `min_tokens`). Returns the text to emit now; after a match, the text up to
    /// the stop string (or through it) and nothing more ever.
    pub fn append(&mut self, new_text: &str, check: bool) -> String {
        if self.matched.is_some() || new_text.is_empty() {
            return String::new();
        }
        let previous_len = self.text.len();
        self.text.push_str(new_text);
        if check && let Some((start, stop_len)) = self.find(previous_len) {
            let end = if self.include_in_output { start + stop_len } else { start };
            self.text.truncate(end);
            self.matched = Some(start);
            return self.emit_to(end);
        }
        let hold = if self.include_in_output { 0 } else { self.partial_stop_suffix_len() };
        self.emit_to(self.text.len() - hold)
    }

    /// Everything not yet emitted (the held-back tail), for a request ending for another
    /// reason.
    pub fn finish(&mut self) -> String {
        self.emit_to(self.text.len())
    }

    /// True once a stop string was found.
    pub fn is_stopped(&self) -> bool {
        self.matched.is_some()
    }

    /// The output text so far, truncated at a matched stop string.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The earliest stop string occurrence that involves text after `previous_len`, as
    /// `(byte offset, length)`.
    fn find(&self, previous_len: usize) -> Option<(usize, usize)> {
        let longest = self.stops.iter().map(String::len).max()?;
        let mut from = previous_len.saturating_sub(longest - 1);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        let window = &self.text[from..];
        self.stops
            .iter()
            .filter_map(|stop| window.find(stop.as_str()).map(|at| (from + at, stop.len())))
            .min_by_key(|&(at, len)| (at, std::cmp::Reverse(len)))
    }

    /// Length of the longest end of the text that is a proper prefix of a stop string.
    fn partial_stop_suffix_len(&self) -> usize {
        self.stops
            .iter()
            .filter_map(|stop| {
                (1..stop.len())
                    .rev()
                    .filter(|&len| stop.is_char_boundary(len))
                    .find(|&len| self.text.ends_with(&stop[..len]))
            })
            .max()
            .unwrap_or(0)
    }

    /// Emits the text from the last emitted byte up to `end`.
    fn emit_to(&mut self, end: usize) -> String {
        if end <= self.emitted {
            return String::new();
        }
        let out = self.text[self.emitted..end].to_owned();
        self.emitted = end;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(stops: &[&str], include: bool, pieces: &[&str]) -> (Vec<String>, bool, String) {
        let mut matcher = StopStrings::new(stops.iter().map(|s| s.to_string()).collect(), include);
        let mut emitted: Vec<String> = pieces.iter().map(|piece| matcher.append(piece, true)).collect();
        emitted.push(matcher.finish());
        (emitted, matcher.is_stopped(), matcher.text().to_owned())
    }

    #[test]
    fn a_stop_string_inside_one_piece_cuts_the_text() {
        let (emitted, stopped, text) = run(&["STOP"], false, &["hello STOP world", "more"]);
        assert_eq!(emitted, ["hello ", "", ""]);
        assert!(stopped);
        assert_eq!(text, "hello ");
    }

    #[test]
    fn a_stop_string_across_pieces_is_held_back_then_dropped() {
        let (emitted, stopped, text) = run(&["</end>"], false, &["ab<", "/e", "nd>", "zz"]);
        assert_eq!(emitted, ["ab", "", "", "", ""]);
        assert!(stopped);
        assert_eq!(text, "ab");
    }

    #[test]
    fn a_held_prefix_that_does_not_complete_is_released() {
        let (emitted, stopped, text) = run(&["</end>"], false, &["ab<", "/x", "y"]);
        assert_eq!(emitted, ["ab", "</x", "y", ""]);
        assert!(!stopped);
        assert_eq!(text, "ab</xy");
    }

    #[test]
    fn the_held_tail_is_flushed_when_the_request_ends_otherwise() {
        let (emitted, stopped, _) = run(&["STOP"], false, &["go ST"]);
        assert_eq!(emitted, ["go ", "ST"]);
        assert!(!stopped);
    }

    #[test]
    fn include_stop_str_in_output_keeps_it_and_holds_nothing() {
        let (emitted, stopped, text) = run(&["</end>"], true, &["ab</e", "nd>tail"]);
        assert_eq!(emitted, ["ab</e", "nd>", ""]);
        assert!(stopped);
        assert_eq!(text, "ab</end>");
    }

    #[test]
    fn the_earliest_of_several_stop_strings_wins() {
        let (emitted, _, text) = run(&["world", "lo w"], false, &["hello world"]);
        assert_eq!(emitted, ["hel", ""]);
        assert_eq!(text, "hel");
    }

    #[test]
    fn multi_byte_stop_strings_hold_whole_characters() {
        let (emitted, stopped, text) = run(&["é!"], false, &["café", "!x"]);
        assert_eq!(emitted, ["caf", "", ""]);
        assert!(stopped);
        assert_eq!(text, "caf");
    }

    #[test]
    fn unchecked_text_is_emitted_without_looking() {
        let mut matcher = StopStrings::new(vec!["x".into()], false);
        assert_eq!(matcher.append("axb", false), "axb");
        assert_eq!(matcher.append("cxd", true), "c");
        assert!(matcher.is_stopped());
    }
}
