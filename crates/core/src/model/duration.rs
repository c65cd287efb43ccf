//! Go-style durations (`15s`, `1m30s`, `250ms`) as they appear in Kubernetes configuration.

use std::time::Duration;

use crate::model::echo::echo;

/// The longest Go duration: an int64 of nanoseconds (some 292 years). Go refuses longer
/// ones, and nothing the scheduler waits for is longer.
pub const MAX_GO_DURATION: Duration = Duration::new(9_223_372_036, 854_775_807);

/// A duration read and written as Go writes it (`15s`, `3m`, `1m30s`, `250ms`): for
/// command-line flags, so that `--help` shows each default from the constant that defines it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl std::fmt::Display for GoDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = self.0;
        if d.is_zero() {
            return f.write_str("0s");
        }
        let secs = d.as_secs();
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        let millis = d.subsec_millis();
        if h > 0 {
            write!(f, "{h}h")?;
        }
        if m > 0 {
            write!(f, "{m}m")?;
        }
        if s > 0 {
            write!(f, "{s}s")?;
        }
        if millis > 0 {
            write!(f, "{millis}ms")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for GoDuration {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        parse_go_duration(s).map(GoDuration)
    }
}

/// Parses a Go duration string. Negative durations are rejected: no configuration field the
/// scheduler reads allows one; so are durations longer than Go's ([`MAX_GO_DURATION`]).
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let shown = echo(s);
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration".to_string());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err(format!("negative duration {shown}"));
    }
    let mut total = 0f64;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {shown}"))?;
        if num_end == 0 {
            return Err(format!("invalid duration {shown}"));
        }
        let value: f64 = rest[..num_end]
            .parse()
            .map_err(|_| format!("invalid duration {shown}"))?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => return Err(format!("unknown unit {} in duration {shown}", echo(unit))),
        };
        total += value * scale;
        rest = &rest[unit_end..];
    }
    Duration::try_from_secs_f64(total)
        .ok()
        .filter(|d| *d <= MAX_GO_DURATION)
        .ok_or_else(|| format!("duration {shown} out of range (at most {MAX_GO_DURATION:?})"))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_go_duration_reads_back_what_it_writes() {
        for (d, text) in [
            (Duration::from_secs(15), "15s"),
            (Duration::from_secs(180), "3m"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_millis(250), "250ms"),
            (Duration::from_secs(7200), "2h"),
            (Duration::ZERO, "0s"),
        ] {
            assert_eq!(GoDuration(d).to_string(), text);
            assert_eq!(text.parse::<GoDuration>(), Ok(GoDuration(d)));
        }
    }

    use super::*;

    #[test]
    fn go_forms() {
        assert_eq!(parse_go_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_go_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_go_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_go_duration("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        for bad in ["", "15", "s", "-1s", "1x", "1s2"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn go_range_only() {
        assert_eq!(
            parse_go_duration("2562047h"),
            Ok(Duration::from_secs(2_562_047 * 3600))
        );
        assert_eq!(
            parse_go_duration("2562048h"),
            Err("duration \"2562048h\" out of range (at most 9223372036.854775807s)".to_string())
        );
        assert!(parse_go_duration("1e400s").is_err());
        let long = format!("{}s", "9".repeat(1000));
        let e = parse_go_duration(&long).unwrap_err();
        assert!(e.len() < 200, "{e}");
        assert!(e.contains("... (1001 bytes)"), "{e}");
    }
}
