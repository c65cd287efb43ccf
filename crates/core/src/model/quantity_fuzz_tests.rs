//! Properties of quantity parsing: no string makes it panic, and the two integer views of a
//! quantity are its exact value rounded up (towards positive infinity), computed here
//! independently with integer arithmetic.

use proptest::prelude::*;

use super::quantity::Quantity;
use gantry_test_support::fuzz;

/// The suffixes, each with its factor as a fraction (numerator, denominator).
const SUFFIXES: &[(&str, u128, u128)] = &[
    ("", 1, 1),
    ("Ki", 1 << 10, 1),
    ("Mi", 1 << 20, 1),
    ("Gi", 1 << 30, 1),
    ("Ti", 1 << 40, 1),
    ("Pi", 1 << 50, 1),
    ("Ei", 1 << 60, 1),
    ("n", 1, 1_000_000_000),
    ("u", 1, 1_000_000),
    ("m", 1, 1_000),
    ("k", 1_000, 1),
    ("M", 1_000_000, 1),
    ("G", 1_000_000_000, 1),
    ("T", 1_000_000_000_000, 1),
    ("P", 1_000_000_000_000_000, 1),
    ("E", 1_000_000_000_000_000_000, 1),
];

/// A decimal exponent suffix (`e3`, `E-2`) and its factor.
fn exponent() -> impl Strategy<Value = (String, u128, u128)> {
    (prop_oneof![Just('e'), Just('E')], -9i32..=18, any::<bool>()).prop_map(|(e, k, plus)| {
        let text = match (k >= 0, plus) {
            (true, true) => format!("{e}+{k}"),
            _ => format!("{e}{k}"),
        };
        let factor = 10u128.pow(k.unsigned_abs());
        if k >= 0 {
            (text, factor, 1)
        } else {
            (text, 1, factor)
        }
    })
}

/// A suffix of either kind and its factor.
fn suffix() -> impl Strategy<Value = (String, u128, u128)> {
    prop_oneof![
        3 => prop::sample::select(SUFFIXES).prop_map(|(s, n, d)| (s.to_string(), n, d)),
        1 => exponent(),
    ]
}

/// `ceil(n / d)` for positive `d`.
fn ceil_div(n: u128, d: u128) -> u128 {
    n.div_ceil(d)
}

proptest! {
    #[test]
    fn fuzz_quantity_parse_never_panics(text in prop_oneof![any::<String>(), fuzz::quantity_like()]) {
        if let Ok(q) = Quantity::parse(&text) {
            let (value, milli) = (q.value(), q.milli_value());
            if q.is_negative() {
                prop_assert!(value <= 0, "{text:?}: value {value}");
            } else {
                prop_assert!(value >= 0 && milli >= 0, "{text:?}: {value}, {milli}m");
                prop_assert!(milli == i64::MAX || milli <= value.saturating_mul(1000), "{text:?}: {value}, {milli}m");
            }
        }
    }

    #[test]
    fn fuzz_quantity_views_are_the_exact_value_rounded_up(
        negative in any::<bool>(),
        whole in 0u64..1_000_000,
        fraction in "[0-9]{0,6}",
        point in any::<bool>(),
        (suffix, num, den) in suffix(),
    ) {
        let point = point || !fraction.is_empty();
        let text = format!(
            "{}{whole}{}{fraction}{suffix}",
            if negative { "-" } else { "" },
            if point { "." } else { "" },
        );
        let scale = 10u128.pow(fraction.len() as u32);
        let digits = u128::from(whole) * scale + fraction.parse::<u128>().unwrap_or(0);
        // The exact value is digits * num / (scale * den).
        let (n, d) = (digits * num, scale * den);
        let max = i64::MAX as u128;
        let parsed = Quantity::parse(&text);
        if negative && digits != 0 {
            let (value, milli) = (n / d, n * 1000 / d);
            prop_assert_eq!(parsed.is_ok(), value <= max, "{}", text);
            if let Ok(q) = parsed {
                prop_assert!(q.is_negative());
                prop_assert_eq!(q.value(), -(value as i64), "{}", text);
                if milli <= max {
                    prop_assert_eq!(q.milli_value(), -(milli as i64), "{}", text);
                }
            }
        } else {
            let (value, milli) = (ceil_div(n, d), ceil_div(n * 1000, d));
            prop_assert_eq!(parsed.is_ok(), value <= max, "{}", text);
            if let Ok(q) = parsed {
                prop_assert!(!q.is_negative());
                prop_assert_eq!(q.value(), value as i64, "{}", text);
                prop_assert_eq!(q.milli_value(), milli.min(max) as i64, "{}", text);
            }
        }
    }

    #[test]
    fn fuzz_quantity_long_fractions_still_round_up(
        whole in 0u64..1000,
        zeros in 0usize..60,
        tail in "[1-9][0-9]{0,20}",
    ) {
        let text = format!("{whole}.{}{tail}", "0".repeat(zeros));
        let q = Quantity::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(q.value(), whole as i64 + 1, "{}", text);
        let milli = if zeros >= 3 {
            whole as i64 * 1000 + 1
        } else {
            q.milli_value()
        };
        prop_assert_eq!(q.milli_value(), milli, "{}", text);
    }

    #[test]
    fn fuzz_quantity_order_follows_the_value(
        a in 0u64..1_000_000,
        b in 0u64..1_000_000,
        (suffix, _, _) in suffix(),
    ) {
        let parse = |v: u64| Quantity::parse(&format!("{v}{suffix}"));
        let (low, high) = (a.min(b), a.max(b));
        if let (Ok(ql), Ok(qh)) = (parse(low), parse(high)) {
            prop_assert!(ql.value() <= qh.value(), "{}{} {}{}", low, suffix, high, suffix);
            prop_assert!(ql.milli_value() <= qh.milli_value(), "{}{} {}{}", low, suffix, high, suffix);
        }
    }
}
