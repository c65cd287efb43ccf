//! Checks on YAML text before it reaches the YAML parser, for every file gantry reads (its
//! configuration files, the simulator's input).
//!
//! The parser's cost grows with the square of the nesting depth (100,000 nested brackets
//! take some 40 seconds) and the decoder refuses anything deeper than 128 levels anyway, but
//! only after the parser has done that work. [`check_depth`] measures the depth in one linear
//! pass and refuses deeper text first.

/// The deepest nesting accepted: the YAML decoder's own limit, far above any real manifest
/// (a pod's node affinity is some ten levels deep, a CRD's schema a few dozen).
pub const MAX_DEPTH: usize = 128;

/// YAML nested deeper than the limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nested deeper than {limit} levels at line {line}")]
pub struct TooDeep {
    /// The limit.
    pub limit: usize,
    /// The 1-based line at which the limit was passed.
    pub line: usize,
}

/// `text` without a UTF-8 byte-order mark at its start (editors on Windows write one; YAML
/// allows it there).
pub fn strip_bom(text: &str) -> &str {
    text.strip_prefix('\u{feff}').unwrap_or(text)
}

/// Checks that no collection in `text` (one or more YAML or JSON documents) is nested more
/// than `limit` levels deep, in time linear in the text's length.
///
/// The depth counted is the number of open block collections (by indentation, a sequence
/// entry `- ` or a mapping key opening one) plus the number of open flow collections
/// (`[`, `{`). Brackets and indicators inside quoted scalars, block scalars (`|`, `>`),
/// plain scalars and comments are not nesting. The count may differ from the parser's by a
/// level where the two disagree on malformed text; it never misses nesting the parser would
/// build.
pub fn check_depth(text: &str, limit: usize) -> Result<(), TooDeep> {
    let mut scanner = Scanner {
        limit,
        line: 0,
        stack: Vec::new(),
        flow: 0,
        flow_node_start: false,
        quote: None,
        block_scalar: None,
        plain: None,
    };
    for (i, line) in strip_bom(text).split('\n').enumerate() {
        scanner.line = i + 1;
        scanner.scan_line(line.as_bytes())?;
    }
    Ok(())
}

/// What a block collection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Sequence,
    Mapping,
}

/// The scanner's state between lines.
struct Scanner {
    limit: usize,
    /// The current line, 1-based.
    line: usize,
    /// Open block collections: their column and kind, innermost last.
    stack: Vec<(usize, Kind)>,
    /// Open flow collections.
    flow: usize,
    /// In a flow collection, whether the next token starts a node (so that a quote there
    /// opens a quoted scalar, not a plain scalar's apostrophe).
    flow_node_start: bool,
    /// Inside a quoted scalar opened by this quote character.
    quote: Option<u8>,
    /// Inside a block scalar: lines indented more than this (or blank) are its content. -1
    /// at the top level.
    block_scalar: Option<isize>,
    /// After a plain scalar: lines indented more than this continue it.
    plain: Option<isize>,
}

fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t' || b == b'\r'
}

/// Whether position `i` of `s` ends a token: the end of the line or a blank.
fn ends_token(s: &[u8], i: usize) -> bool {
    s.get(i).is_none_or(|&b| is_blank(b))
}

fn skip_blanks(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && is_blank(s[i]) {
        i += 1;
    }
    i
}

impl Scanner {
    fn check(&self) -> Result<(), TooDeep> {
        if self.stack.len() + self.flow > self.limit {
            return Err(TooDeep {
                limit: self.limit,
                line: self.line,
            });
        }
        Ok(())
    }

    /// The column of the innermost open block collection, -1 at the top level: a block or
    /// plain scalar in it continues on the lines indented more than that.
    fn base(&self) -> isize {
        self.stack.last().map_or(-1, |&(col, _)| col as isize)
    }

    /// A block collection of `kind` has a node at column `col`: a sibling of the innermost
    /// one at that column, or a new, deeper one.
    fn open(&mut self, col: usize, kind: Kind) -> Result<(), TooDeep> {
        if kind == Kind::Mapping && self.stack.last() == Some(&(col, Kind::Sequence)) {
            // A key at the column of a sequence that was a mapping value (`key:` then
            // `- item` at the key's indentation): that sequence has ended.
            self.stack.pop();
        }
        match self.stack.last() {
            Some(&(c, k)) if c == col && k == kind => Ok(()),
            _ => {
                self.stack.push((col, kind));
                self.check()
            }
        }
    }

    fn scan_line(&mut self, s: &[u8]) -> Result<(), TooDeep> {
        let indent = s.iter().take_while(|&&b| b == b' ').count();
        let blank = s[indent..].iter().all(|&b| is_blank(b));
        let document_marker = (s.starts_with(b"---") || s.starts_with(b"...")) && ends_token(s, 3);
        if let Some(base) = self.block_scalar {
            if blank || (indent as isize > base && !(base < 0 && document_marker)) {
                return Ok(());
            }
            self.block_scalar = None;
        }
        if let Some(quote) = self.quote {
            // A quoted scalar that spans lines is a value, never a key: once it closes, only
            // the rest of an enclosing flow collection matters.
            return match self.quoted(s, 0, quote) {
                Some(end) if self.flow > 0 => self.flow_scan(s, end).map(|_| ()),
                _ => Ok(()),
            };
        }
        if self.flow > 0 {
            return self.flow_scan(s, 0).map(|_| ());
        }
        if blank {
            return Ok(());
        }
        if let Some(base) = self.plain.take()
            && indent as isize > base
            && !document_marker
        {
            // A continuation line of a multi-line plain scalar: text, up to a comment.
            self.plain = Some(base);
            return Ok(());
        }
        if document_marker {
            self.stack.clear();
            return self.block_node(s, 3);
        }
        if indent == 0 && s[0] == b'%' {
            // A directive (`%YAML 1.2`).
            return Ok(());
        }
        while self.stack.last().is_some_and(|&(col, _)| col > indent) {
            self.stack.pop();
        }
        self.block_node(s, indent)
    }

    /// Scans block-context nodes on line `s` from byte `i`, where a node may start.
    fn block_node(&mut self, s: &[u8], mut i: usize) -> Result<(), TooDeep> {
        loop {
            i = skip_blanks(s, i);
            let Some(&c) = s.get(i) else {
                return Ok(());
            };
            let col = i;
            let end = match c {
                b'#' => return Ok(()),
                b'-' | b'?' if ends_token(s, i + 1) => {
                    let kind = if c == b'-' {
                        Kind::Sequence
                    } else {
                        Kind::Mapping
                    };
                    self.open(col, kind)?;
                    i += 1;
                    continue;
                }
                b'&' | b'!' => {
                    // An anchor or a tag: the node follows it.
                    while i < s.len() && !is_blank(s[i]) {
                        i += 1;
                    }
                    continue;
                }
                b'|' | b'>' => {
                    self.block_scalar = Some(self.base());
                    return Ok(());
                }
                b'[' | b'{' => {
                    self.flow = 1;
                    self.check()?;
                    self.flow_node_start = true;
                    match self.flow_scan(s, i + 1)? {
                        Some(end) => end,
                        None => return Ok(()),
                    }
                }
                b'\'' | b'"' => match self.quoted(s, i + 1, c) {
                    Some(end) => end,
                    None => return Ok(()),
                },
                _ => {
                    // A plain scalar (or an alias): up to `: ` if it is a key, a comment, or
                    // the end of the line.
                    let mut j = i + 1;
                    loop {
                        match s.get(j) {
                            None => {
                                self.plain = Some(self.base());
                                return Ok(());
                            }
                            Some(b'#') if is_blank(s[j - 1]) => return Ok(()),
                            Some(b':') if ends_token(s, j + 1) => break j,
                            Some(_) => j += 1,
                        }
                    }
                }
            };
            // After a node: `: ` makes it a key of a mapping at its column, and its value
            // follows; anything else ends what matters on the line.
            let j = skip_blanks(s, end);
            if s.get(j) == Some(&b':') && ends_token(s, j + 1) {
                self.open(col, Kind::Mapping)?;
                i = j + 1;
            } else {
                return Ok(());
            }
        }
    }

    /// Scans a quoted scalar's text on `s` from `i`; the position after its closing quote,
    /// or `None` (and the scalar still open) at the end of the line.
    fn quoted(&mut self, s: &[u8], mut i: usize, quote: u8) -> Option<usize> {
        while i < s.len() {
            match s[i] {
                b'\\' if quote == b'"' => i += 2,
                b'\'' if quote == b'\'' && s.get(i + 1) == Some(&b'\'') => i += 2,
                b if b == quote => {
                    self.quote = None;
                    return Some(i + 1);
                }
                _ => i += 1,
            }
        }
        self.quote = Some(quote);
        None
    }

    /// Scans flow-collection text on `s` from `i`; the position after the bracket that
    /// closes the outermost collection, or `None` at the end of the line (still inside).
    fn flow_scan(&mut self, s: &[u8], mut i: usize) -> Result<Option<usize>, TooDeep> {
        while i < s.len() {
            let c = s[i];
            match c {
                b'#' if i == 0 || is_blank(s[i - 1]) => return Ok(None),
                b'[' | b'{' => {
                    self.flow += 1;
                    self.check()?;
                    self.flow_node_start = true;
                }
                b']' | b'}' => {
                    self.flow = self.flow.saturating_sub(1);
                    self.flow_node_start = false;
                    if self.flow == 0 {
                        return Ok(Some(i + 1));
                    }
                }
                b',' | b':' | b'?' => self.flow_node_start = true,
                b'\'' | b'"' if self.flow_node_start => {
                    self.flow_node_start = false;
                    match self.quoted(s, i + 1, c) {
                        Some(end) => {
                            i = end;
                            continue;
                        }
                        None => return Ok(None),
                    }
                }
                b if is_blank(b) => {}
                _ => self.flow_node_start = false,
            }
            i += 1;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str, limit: usize) -> bool {
        check_depth(text, limit).is_ok()
    }

    /// The smallest limit `text` passes.
    fn depth(text: &str) -> usize {
        (0..=MAX_DEPTH)
            .find(|&l| depth_ok(text, l))
            .unwrap_or(usize::MAX)
    }

    #[test]
    fn a_hundred_thousand_brackets_are_refused_at_once() {
        let text = "[".repeat(100_000);
        assert_eq!(
            check_depth(&text, MAX_DEPTH),
            Err(TooDeep {
                limit: MAX_DEPTH,
                line: 1
            })
        );
        assert_eq!(
            check_depth(&text, MAX_DEPTH).unwrap_err().to_string(),
            "nested deeper than 128 levels at line 1"
        );
        let objects = "{\"a\": ".repeat(100_000);
        assert!(!depth_ok(&objects, MAX_DEPTH));
    }

    #[test]
    fn the_limit_itself_is_accepted() {
        let at = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(depth_ok(&at, MAX_DEPTH));
        let over = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert!(!depth_ok(&over, MAX_DEPTH));
    }

    #[test]
    fn the_line_is_where_the_limit_is_passed() {
        let text = format!("a: 1\nb:\n{}", "[\n".repeat(200));
        assert_eq!(
            check_depth(&text, MAX_DEPTH).unwrap_err().line,
            2 + MAX_DEPTH,
            "the mapping is one level, each line one more"
        );
    }

    #[test]
    fn block_nesting_counts_by_indentation() {
        assert_eq!(depth("a: 1\nb: 2\n"), 1);
        assert_eq!(depth("a:\n  b:\n    c: 1\n  d: 2\ne: 3\n"), 3);
        assert_eq!(depth("- - - x\n"), 3);
        assert_eq!(depth("- a: 1\n  b: [x, {y: z}]\n"), 4);
        // A sequence at its key's indentation is still a level below the mapping.
        assert_eq!(depth("a:\n- x\n- y\nb: 1\n"), 2);
        assert_eq!(
            depth("spec:\n  containers:\n  - name: a\n    ports:\n    - containerPort: 80\n"),
            6
        );
        let mut deep = String::new();
        for level in 0..200 {
            deep.push_str(&" ".repeat(level * 2));
            deep.push_str("a:\n");
        }
        assert_eq!(
            check_depth(&deep, MAX_DEPTH),
            Err(TooDeep {
                limit: MAX_DEPTH,
                line: MAX_DEPTH + 1
            })
        );
        assert!(!depth_ok(&format!("{}x\n", "- ".repeat(200)), MAX_DEPTH));
    }

    #[test]
    fn documents_start_over() {
        let one = format!("{}x\n", "- ".repeat(100));
        let text = format!("{one}---\n{one}--- \n{one}");
        assert_eq!(depth(&text), 100);
    }

    #[test]
    fn brackets_that_are_text_do_not_count() {
        let b = "[".repeat(500);
        let text = format!(
            "a: \"{b}\"\n\
             b: '{b} it''s'\n\
             c: plain {b} text\n\
             d: x # {b}\n\
             # {b}\n\
             e: |\n  {b}\n  'unclosed\n\n  \"{b}\n\
             f: >-\n    {b}\n\
             g: more\n  continued {b}\n  lines\n\
             h: [\"{b}\", '{b}', x # {b}\n  ]\n\
             j:\n- \"multi\n  line {b}\n  still\"\n\
             i: http://example.com/a#b\n"
        );
        assert_eq!(depth(&text), 2, "{}", check_depth(&text, 1).unwrap_err());
    }

    #[test]
    fn an_apostrophe_in_a_plain_scalar_hides_nothing() {
        let deep = "[".repeat(200);
        assert!(!depth_ok(&format!("a: it's\nb: {deep}\n"), MAX_DEPTH));
        assert!(!depth_ok(&format!("a: [it's, {deep}\n"), MAX_DEPTH));
        assert!(!depth_ok(&format!("a: 'x\n  y'\nb: {deep}\n"), MAX_DEPTH));
        assert!(!depth_ok(
            &format!("a: |\n  {deep}\nb: {deep}\n"),
            MAX_DEPTH
        ));
        assert!(!depth_ok(&format!("a: \"x\\\"\"\nb: {deep}\n"), MAX_DEPTH));
        assert!(!depth_ok(&format!("a: 'x''y'\nb: {deep}\n"), MAX_DEPTH));
    }

    #[test]
    fn json_is_measured_too() {
        assert_eq!(depth(r#"{"a": {"b": [1, {"c": "]]]"}]}}"#), 4);
    }

    #[test]
    fn real_manifests_pass() {
        for text in [
            include_str!("../../../sim/src/example.yaml"),
            include_str!("../../../../deploy/20-configmap.yaml"),
        ] {
            let d = depth(text);
            assert!(d < 20, "depth {d}");
        }
    }

    #[test]
    fn a_byte_order_mark_is_dropped() {
        assert_eq!(strip_bom("\u{feff}a: 1"), "a: 1");
        assert_eq!(strip_bom("a: 1"), "a: 1");
        assert_eq!(depth("\u{feff}- - x"), 2);
    }
}
