//! Input repeated in error messages, cut to a bounded size. An error names the value it
//! rejects, but a value can be as large as the input (a 30 MB quantity, a megabyte-long
//! name): repeating it whole would flood logs, events and terminals. Every error that echoes
//! input goes through these helpers.

use std::fmt;

/// Bytes of an echoed value shown at most; the rest is replaced by its length.
pub const ECHO_LIMIT: usize = 64;

/// Bytes of a whole error message kept at most (beyond the cut of its quoted values).
pub const MESSAGE_LIMIT: usize = 1024;

/// A value as an error message shows it: see [`echo`] and [`echo_name`].
#[derive(Debug, Clone, Copy)]
pub struct Echo<'a> {
    text: &'a str,
    quoted: bool,
}

/// `text` quoted and escaped as `{:?}` prints it, cut after [`ECHO_LIMIT`] bytes:
/// `"aaaa"... (30000000 bytes)`.
pub fn echo(text: &str) -> Echo<'_> {
    Echo { text, quoted: true }
}

/// `text` as it is (for names printed bare, such as `pod ns/name`), cut after
/// [`ECHO_LIMIT`] bytes: `aaaa... (30000000 bytes)`.
pub fn echo_name(text: &str) -> Echo<'_> {
    Echo {
        text,
        quoted: false,
    }
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
fn prefix(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The longest suffix of `text` of at most `limit` bytes that starts on a character boundary.
fn suffix(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut start = text.len() - limit;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

impl fmt::Display for Echo<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = prefix(self.text, ECHO_LIMIT);
        if self.quoted {
            write!(f, "{shown:?}")?;
        } else {
            f.write_str(shown)?;
        }
        if shown.len() < self.text.len() {
            write!(f, "... ({} bytes)", self.text.len())?;
        }
        Ok(())
    }
}

/// A decoder's `message` about the field at `path` (serde_path_to_error's; empty or `.` at the
/// top): `path: message`, without the decoder's ` at line L column C`, which in a one-line
/// document says nothing the path does not.
pub fn at_path(path: &str, message: &str) -> String {
    let message = match message.rfind(" at line ") {
        Some(at) => &message[..at],
        None => message,
    };
    if path.is_empty() || path == "." {
        message.to_string()
    } else {
        format!("{path}: {message}")
    }
}

/// An error message from elsewhere (a decoder, a parser) made safe to show: every run
/// between double quotes or backticks longer than [`ECHO_LIMIT`] bytes (the way serde and
/// most parsers quote the value they reject) is cut as [`echo`] cuts a value, and what is
/// still longer than [`MESSAGE_LIMIT`] keeps its beginning and its end (where a position
/// such as `at line 3 column 5` usually is). Short messages come back unchanged.
pub fn bound_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MESSAGE_LIMIT + 64));
    let bytes = message.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let quote = bytes[i];
        if quote != b'"' && quote != b'`' {
            i += 1;
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while end < bytes.len() && bytes[end] != quote {
            // Debug-escaped strings escape their quotes with a backslash.
            end += if quote == b'"' && bytes[end] == b'\\' {
                2
            } else {
                1
            };
        }
        let end = end.min(bytes.len());
        if end - start > ECHO_LIMIT {
            out.push_str(&message[copied..start]);
            let inner = &message[start..end];
            // A cut escape would escape the closing quote.
            out.push_str(prefix(inner, ECHO_LIMIT).trim_end_matches('\\'));
            // The closing quote, when there is one, then the length of the whole value.
            if end < bytes.len() {
                out.push(char::from(quote));
            }
            out.push_str(&format!("... ({} bytes)", inner.len()));
            copied = (end + 1).min(bytes.len());
        }
        i = end + 1;
    }
    out.push_str(&message[copied.min(message.len())..]);
    if out.len() <= MESSAGE_LIMIT {
        return out;
    }
    let head = prefix(&out, MESSAGE_LIMIT * 3 / 4);
    let tail = suffix(&out, MESSAGE_LIMIT / 4);
    format!(
        "{head} ... ({} bytes left out) ... {tail}",
        out.len() - head.len() - tail.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_shown_whole() {
        assert_eq!(echo("12parsecs").to_string(), "\"12parsecs\"");
        assert_eq!(echo_name("web-0").to_string(), "web-0");
        let exact = "a".repeat(ECHO_LIMIT);
        assert_eq!(echo(&exact).to_string(), format!("{exact:?}"));
    }

    #[test]
    fn long_values_are_cut_with_their_length() {
        let long = "9".repeat(30_000_000);
        let shown = echo(&long).to_string();
        assert_eq!(
            shown,
            format!("\"{}\"... (30000000 bytes)", "9".repeat(ECHO_LIMIT))
        );
        assert_eq!(
            echo_name(&long).to_string(),
            format!("{}... (30000000 bytes)", "9".repeat(ECHO_LIMIT))
        );
    }

    #[test]
    fn cuts_fall_on_character_boundaries() {
        let long = "é".repeat(100);
        let shown = echo_name(&long).to_string();
        assert!(shown.starts_with(&"é".repeat(ECHO_LIMIT / 2)), "{shown}");
        assert!(shown.ends_with("... (200 bytes)"), "{shown}");
    }

    #[test]
    fn messages_keep_short_quotes_and_cut_long_ones() {
        let short = "invalid type: string \"abc\", expected i64 at line 3 column 5";
        assert_eq!(bound_message(short), short);
        let value = "x".repeat(10_000);
        let message = format!("invalid type: string \"{value}\", expected i64 at line 3 column 5");
        assert_eq!(
            bound_message(&message),
            format!(
                "invalid type: string \"{}\"... (10000 bytes), expected i64 at line 3 column 5",
                "x".repeat(ECHO_LIMIT)
            )
        );
        let message = format!("unknown field `{value}`, expected `name` or `weight`");
        assert_eq!(
            bound_message(&message),
            format!(
                "unknown field `{}`... (10000 bytes), expected `name` or `weight`",
                "x".repeat(ECHO_LIMIT)
            )
        );
    }

    #[test]
    fn escaped_quotes_do_not_end_a_value() {
        let value = format!("{:?}", format!("a\"{}", "b".repeat(100)));
        let message = format!("bad {value} here");
        let bounded = bound_message(&message);
        assert!(bounded.ends_with("... (103 bytes) here"), "{bounded}");
    }

    #[test]
    fn long_unquoted_messages_keep_both_ends() {
        let message = format!("{} at line 7 column 1", "p.".repeat(5_000));
        let bounded = bound_message(&message);
        assert!(bounded.len() < MESSAGE_LIMIT + 64, "{}", bounded.len());
        assert!(bounded.starts_with("p.p."), "{bounded}");
        assert!(bounded.ends_with("at line 7 column 1"), "{bounded}");
        assert!(bounded.contains("bytes left out"), "{bounded}");
    }

    #[test]
    fn an_unclosed_quote_is_cut_too() {
        let message = format!("bad \"{}", "z".repeat(500));
        assert_eq!(
            bound_message(&message),
            format!("bad \"{}... (500 bytes)", "z".repeat(ECHO_LIMIT))
        );
    }
}
