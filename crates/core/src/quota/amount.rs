//! Quantities as quota arithmetic needs them: exact sums and differences that remember the
//! format of what was added, printed in canonical form.
//!
//! Mirrors `k8s.io/apimachinery/pkg/api/resource.Quantity`: a sum takes the format of its first
//! non-zero operand (`Quantity.Add`), and `String()` prints the canonical form —
//! `CanonicalizeBytes`: decimal values as the largest SI suffix that keeps an integer mantissa
//! (`1500m`, `2k`), binary values as the largest power-of-1024 suffix that divides them exactly
//! (`1536Mi`), with binary values under 1024 or with a fraction printed as decimal ones.

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use crate::validation::quantity::Quantity;

/// How a quantity is written (upstream `resource.Format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// `1e3`, `5e-3`.
    DecimalExponent,
    /// `1Ki`, `512Mi`.
    BinarySI,
    /// `100m`, `2k`, `5`.
    #[default]
    DecimalSI,
}

/// An exact quantity (in nano-units) with the format it prints in.
#[derive(Debug, Clone, Copy, Default)]
pub struct Amount {
    nanos: i128,
    format: Format,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

impl Amount {
    /// Zero, printed `0`.
    pub const ZERO: Amount = Amount {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// A whole number of units (`pods=1`), in decimal format.
    pub fn from_units(n: i64) -> Amount {
        Amount {
            nanos: i128::from(n) * NANOS_PER_UNIT,
            format: Format::DecimalSI,
        }
    }

    /// Parses a quantity string; `None` when it is malformed.
    pub fn parse(s: &str) -> Option<Amount> {
        let q = Quantity::parse(s)?;
        let s = s.trim();
        let format = if s.ends_with('i') {
            Format::BinarySI
        } else if s.trim_start_matches(['+', '-']).contains(['e', 'E']) {
            Format::DecimalExponent
        } else {
            Format::DecimalSI
        };
        Some(Amount {
            nanos: q.nanos(),
            format,
        })
    }

    /// Reads a quantity from JSON: a string, or a number (YAML `cpu: 1` arrives as one).
    pub fn from_value(v: &Value) -> Option<Amount> {
        match v {
            Value::String(s) => Amount::parse(s),
            Value::Number(n) => Amount::parse(&n.to_string()),
            _ => None,
        }
    }

    /// The value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// The value in milli-units, rounded up as upstream's `MilliValue`.
    pub fn millis(self) -> i128 {
        let per_milli = 1_000_000;
        if self.nanos >= 0 {
            // Rounded up without `nanos + per_milli - 1`, which overflows near the maximum.
            self.nanos / per_milli + i128::from(self.nanos % per_milli != 0)
        } else {
            self.nanos / per_milli
        }
    }

    /// Whether the quantity is zero.
    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// Whether the quantity is below zero.
    pub fn is_negative(self) -> bool {
        self.nanos < 0
    }

    /// The larger of two amounts (the first on a tie), as upstream's `max` of resource lists.
    pub fn max(self, other: Amount) -> Amount {
        if other.nanos > self.nanos {
            other
        } else {
            self
        }
    }

    /// Compares values, ignoring format.
    pub fn cmp_value(self, other: Amount) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }

    /// The canonical text, as a JSON string.
    pub fn to_value(self) -> Value {
        Value::String(self.to_string())
    }
}

impl std::ops::Add for Amount {
    type Output = Amount;

    /// `self + other` (saturating); the result keeps `self`'s format unless `self` is zero.
    fn add(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }
}

impl std::ops::Sub for Amount {
    type Output = Amount;

    /// `self - other` (saturating), in `self`'s format (or `other`'s when `self` is zero).
    fn sub(self, other: Amount) -> Amount {
        Amount {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }
}

impl PartialEq for Amount {
    /// Equality of values, as upstream's semantic equality of quantities.
    fn eq(&self, other: &Amount) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Amount {}

/// The decimal mantissa and power-of-ten exponent (a multiple of 3) of `nanos`, upstream's
/// `AsCanonicalBytes`.
fn decimal_parts(nanos: i128) -> (i128, i32) {
    let mut mantissa = nanos;
    let mut exponent: i32 = -9;
    while mantissa != 0 && mantissa % 10 == 0 {
        mantissa /= 10;
        exponent += 1;
    }
    match exponent % 3 {
        1 | -2 => (mantissa.saturating_mul(10), exponent - 1),
        2 | -1 => (mantissa.saturating_mul(100), exponent - 2),
        _ => (mantissa, exponent),
    }
}

fn decimal_suffix(exponent: i32) -> Option<&'static str> {
    Some(match exponent {
        -9 => "n",
        -6 => "u",
        -3 => "m",
        0 => "",
        3 => "k",
        6 => "M",
        9 => "G",
        12 => "T",
        15 => "P",
        18 => "E",
        _ => return None,
    })
}

const BINARY_SUFFIXES: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let whole = self.nanos % NANOS_PER_UNIT == 0;
        // `unsigned_abs`: a saturated difference can be `i128::MIN`, which `abs` cannot negate.
        let small = self.nanos.unsigned_abs() < 1024 * NANOS_PER_UNIT.unsigned_abs();
        let format = match self.format {
            Format::BinarySI if small || !whole => Format::DecimalSI,
            other => other,
        };
        if format == Format::BinarySI {
            let mut value = self.nanos / NANOS_PER_UNIT;
            let mut power = 0;
            while power < BINARY_SUFFIXES.len() - 1 && value % 1024 == 0 {
                value /= 1024;
                power += 1;
            }
            return write!(f, "{value}{}", BINARY_SUFFIXES[power]);
        }
        let (mantissa, exponent) = decimal_parts(self.nanos);
        match (format, decimal_suffix(exponent)) {
            (Format::DecimalSI, Some(suffix)) => write!(f, "{mantissa}{suffix}"),
            (_, _) if exponent == 0 => write!(f, "{mantissa}"),
            _ => write!(f, "{mantissa}e{exponent}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(s: &str) -> String {
        Amount::parse(s).expect(s).to_string()
    }

    #[test]
    fn decimal_quantities_print_with_the_largest_exact_suffix() {
        assert_eq!(canonical("1"), "1");
        assert_eq!(canonical("0.5"), "500m");
        assert_eq!(canonical("1000m"), "1");
        assert_eq!(canonical("1500m"), "1500m");
        assert_eq!(canonical("2000"), "2k");
        assert_eq!(canonical("1.5"), "1500m");
        assert_eq!(canonical("0"), "0");
        assert_eq!(canonical("-100m"), "-100m");
    }

    #[test]
    fn binary_quantities_print_in_powers_of_1024_when_exact() {
        assert_eq!(canonical("1024Mi"), "1Gi");
        assert_eq!(canonical("1.5Gi"), "1536Mi");
        assert_eq!(canonical("512Ki"), "512Ki");
        // Under 1024 bytes, or with a fraction, upstream prints decimal.
        assert_eq!(canonical("0.5Ki"), "512");
        assert_eq!(canonical("1e3"), "1e3");
    }

    #[test]
    fn sums_take_the_format_of_the_first_non_zero_operand() {
        let mi = Amount::parse("512Mi").expect("quantity");
        let total = Amount::ZERO + mi + mi;
        assert_eq!(total.to_string(), "1Gi");
        let cpu = Amount::parse("250m").expect("quantity") + Amount::parse("1").expect("quantity");
        assert_eq!(cpu.to_string(), "1250m");
        assert_eq!((total - mi).to_string(), "512Mi");
    }

    #[test]
    fn milli_values_round_up() {
        assert_eq!(Amount::parse("1n").expect("q").millis(), 1);
        assert_eq!(Amount::parse("1").expect("q").millis(), 1000);
    }

    #[test]
    fn saturated_amounts_print_and_round_without_overflow() {
        // Found by the property tests: `abs` of i128::MIN and the rounding of `millis` overflowed.
        let max = Amount::parse("1e40").expect("q");
        let min = Amount::ZERO - max - max;
        assert!(min.is_negative());
        assert!(min.to_string().starts_with('-'));
        assert!(max.millis() > 0);
    }
}
