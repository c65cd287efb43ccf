//! Kubernetes resource quantities (`100m`, `1.5`, `2Gi`, `1e3`, `129M`), parsed exactly.
//!
//! A quantity is a decimal number with an optional suffix: a binary SI suffix (`Ki` .. `Ei`), a
//! decimal SI suffix (`n`, `u`, `m`, `k`, `M`, `G`, `T`, `P`, `E`) or a decimal exponent
//! (`e3`, `E-2`). The scheduler needs two integer views of a quantity: the value (bytes, pods,
//! extended resources) and the milli-value (cpu). Both round up, as Kubernetes does, so that a
//! request is never under-counted.

use thiserror::Error;

use super::echo::echo;

/// Why a string is not a Kubernetes quantity.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid quantity {input}: {reason}")]
pub struct QuantityError {
    /// The rejected text as the message shows it: quoted, and cut after
    /// [`ECHO_LIMIT`](super::echo::ECHO_LIMIT) bytes with its length said (a quantity can
    /// be as long as the input).
    pub input: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// A parsed quantity: `sign * digits * 10^exp10 * 2^exp2`, kept exact until it is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantity {
    negative: bool,
    digits: u128,
    exp10: i32,
    exp2: u32,
    /// A nonzero digit was dropped beyond the precision kept: the value is a little more.
    truncated: bool,
}

/// Largest magnitude we accept: Kubernetes stores quantities as int64 milli-values at most.
const MAX_MAGNITUDE: u128 = i64::MAX as u128;

impl Quantity {
    /// Parses a quantity in any form the Kubernetes API accepts.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = |reason| QuantityError {
            input: echo(input).to_string(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty string"));
        }
        let (negative, rest) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, suffix) = rest.split_at(number_end);
        let (int_part, frac_part) = match number.split_once('.') {
            Some((i, f)) => (i, f),
            None => (number, ""),
        };
        if int_part.is_empty() && frac_part.is_empty() {
            return Err(err("must start with a number"));
        }
        if frac_part.contains('.') {
            return Err(err("more than one decimal point"));
        }
        let mut digits: u128 = 0;
        let mut exp10: i32 = 0;
        let mut truncated = false;
        for c in int_part.bytes().chain(frac_part.bytes()) {
            if digits > u128::MAX / 100 {
                // Further digits cannot matter for an int64 milli-value except through
                // rounding; keep scale, drop precision (remembering whether it rounds up),
                // and let the range check decide.
                exp10 += 1;
                truncated |= c != b'0';
                continue;
            }
            digits = digits * 10 + u128::from(c - b'0');
        }
        exp10 -= i32::try_from(frac_part.len()).map_err(|_| err("too many digits"))?;
        let exp2 = match suffix {
            "" => 0,
            "Ki" => 10,
            "Mi" => 20,
            "Gi" => 30,
            "Ti" => 40,
            "Pi" => 50,
            "Ei" => 60,
            "n" => {
                exp10 -= 9;
                0
            }
            "u" => {
                exp10 -= 6;
                0
            }
            "m" => {
                exp10 -= 3;
                0
            }
            "k" => {
                exp10 += 3;
                0
            }
            "M" => {
                exp10 += 6;
                0
            }
            "G" => {
                exp10 += 9;
                0
            }
            "T" => {
                exp10 += 12;
                0
            }
            "P" => {
                exp10 += 15;
                0
            }
            "E" => {
                exp10 += 18;
                0
            }
            _ => {
                let exponent = suffix
                    .strip_prefix(['e', 'E'])
                    .ok_or_else(|| err("unknown suffix"))?;
                let digits_only = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
                if digits_only.is_empty() || !digits_only.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(err("malformed exponent"));
                }
                let e: i32 = exponent.parse().map_err(|_| err("exponent out of range"))?;
                if e.abs() > 30 {
                    return Err(err("exponent out of range"));
                }
                exp10 += e;
                0
            }
        };
        let q = Quantity {
            negative: negative && digits != 0,
            digits,
            exp10,
            exp2,
            truncated,
        };
        q.scaled(0).map_err(|()| err("value out of range"))?;
        Ok(q)
    }

    /// True for a quantity below zero.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    /// The value in base units (bytes, pods, devices), rounded up.
    pub fn value(&self) -> i64 {
        // The range was checked at parse time.
        self.scaled(0).unwrap_or(i64::MAX)
    }

    /// The value in thousandths of a unit (millicores), rounded up; saturates beyond the i64
    /// range, which no real cpu count reaches.
    pub fn milli_value(&self) -> i64 {
        self.scaled(3).unwrap_or(i64::MAX)
    }

    /// `self * 10^extra`, rounded up (towards positive infinity), if it fits in an i64.
    fn scaled(&self, extra: i32) -> Result<i64, ()> {
        let mut magnitude = self.digits.checked_mul(1u128 << self.exp2).ok_or(())?;
        let exp = self.exp10 + extra;
        let mut inexact = self.truncated;
        if exp >= 0 {
            for _ in 0..exp {
                if magnitude == 0 {
                    break;
                }
                magnitude = magnitude.checked_mul(10).ok_or(())?;
                if magnitude > MAX_MAGNITUDE * 1000 {
                    return Err(());
                }
            }
        } else {
            for _ in 0..(-exp) {
                if magnitude == 0 {
                    break;
                }
                inexact |= magnitude % 10 != 0;
                magnitude /= 10;
            }
        }
        if inexact && !self.negative {
            magnitude += 1;
        }
        if magnitude > MAX_MAGNITUDE {
            return Err(());
        }
        let v = magnitude as i64;
        Ok(if self.negative { -v } else { v })
    }
}

impl std::str::FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Quantity::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i64 {
        Quantity::parse(s).unwrap().milli_value()
    }
    fn value(s: &str) -> i64 {
        Quantity::parse(s).unwrap().value()
    }

    #[test]
    fn cpu_forms() {
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("2"), 2000);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("0.1"), 100);
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E-3"), 1);
        assert_eq!(milli("+3"), 3000);
        assert_eq!(milli("250000u"), 250);
        assert_eq!(milli("1n"), 1, "sub-milli rounds up");
        assert_eq!(milli("0.0001"), 1, "sub-milli rounds up");
        assert_eq!(milli("0"), 0);
    }

    #[test]
    fn memory_forms() {
        assert_eq!(value("128974848"), 128_974_848);
        assert_eq!(value("129e6"), 129_000_000);
        assert_eq!(value("129M"), 129_000_000);
        assert_eq!(value("123Mi"), 123 * 1024 * 1024);
        assert_eq!(value("2Gi"), 2 << 30);
        assert_eq!(value("1.5Gi"), 3 << 29);
        assert_eq!(value("1Ki"), 1024);
        assert_eq!(value("1k"), 1000);
        assert_eq!(value("1Ei"), 1 << 60);
        assert_eq!(value("100m"), 1, "fractional bytes round up");
        assert_eq!(value("1.5"), 2);
    }

    #[test]
    fn digits_beyond_the_precision_kept_still_round_up() {
        // Found by fuzz_quantity_long_fractions_still_round_up: the 39th digit was dropped.
        let text = format!("1.{}1", "0".repeat(37));
        assert_eq!(value(&text), 2);
        assert_eq!(milli(&text), 1001);
        assert_eq!(value(&format!("1.{}", "0".repeat(60))), 1);
        assert_eq!(
            Quantity::parse(&format!("-1.{}1", "0".repeat(37)))
                .unwrap()
                .value(),
            -1
        );
    }

    #[test]
    fn negative_values() {
        let q = Quantity::parse("-100m").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.milli_value(), -100);
        assert!(!Quantity::parse("-0").unwrap().is_negative());
    }

    #[test]
    fn rejects_garbage() {
        for bad in [
            "",
            " ",
            "abc",
            "1.2.3",
            "1Gb",
            "1gi",
            "Mi",
            "1e",
            "1e+",
            "1 Gi",
            "--1",
            "1ee3",
            "1e400",
            "1Ki5",
            "9999999999999999999",
            "10Ei",
            ".",
        ] {
            let e = Quantity::parse(bad);
            assert!(e.is_err(), "{bad:?} parsed as {e:?}");
        }
        let e = Quantity::parse("12parsecs").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid quantity \"12parsecs\": unknown suffix"
        );
    }

    #[test]
    fn a_huge_quantity_is_named_not_echoed() {
        let huge = format!("{}x", "9".repeat(30_000_000));
        let e = Quantity::parse(&huge).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "invalid quantity \"{}\"... (30000001 bytes): unknown suffix",
                "9".repeat(64)
            )
        );
    }
}
