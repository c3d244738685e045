//! Resource quantities (`500m`, `1Gi`, `1e3`): parsing and comparison.
//!
//! Mirrors `k8s.io/apimachinery/pkg/api/resource.ParseQuantity` closely enough to compare
//! quantities exactly: values are held as signed nano-units in an `i128` (saturating), so
//! `1Gi == 1024Mi` and `0.1 == 100m`.

use std::cmp::Ordering;

/// The error upstream returns for a malformed quantity.
pub const QUANTITY_FORMAT_ERROR: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";

/// A parsed quantity, in nano-units (10⁻⁹) of its base unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Quantity {
    nanos: i128,
}

impl Quantity {
    /// Parses a quantity string; `None` when it is not a valid quantity.
    pub fn parse(s: &str) -> Option<Quantity> {
        let s = s.trim();
        let (neg, rest) = match s.as_bytes().first()? {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, suffix) = rest.split_at(num_end);
        if num.is_empty() || num.matches('.').count() > 1 || num == "." {
            return None;
        }
        let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
        let mut mantissa: i128 = 0;
        for c in int_part.bytes().chain(frac_part.bytes()) {
            mantissa = mantissa
                .saturating_mul(10)
                .saturating_add(i128::from(c - b'0'));
        }
        let mut dec_exp: i64 = -(frac_part.len() as i64);
        let mut bin_exp: u32 = 0;
        match suffix {
            "" => {}
            "n" => dec_exp -= 9,
            "u" => dec_exp -= 6,
            "m" => dec_exp -= 3,
            "k" => dec_exp += 3,
            "M" => dec_exp += 6,
            "G" => dec_exp += 9,
            "T" => dec_exp += 12,
            "P" => dec_exp += 15,
            "E" => dec_exp += 18,
            "Ki" => bin_exp = 10,
            "Mi" => bin_exp = 20,
            "Gi" => bin_exp = 30,
            "Ti" => bin_exp = 40,
            "Pi" => bin_exp = 50,
            "Ei" => bin_exp = 60,
            _ => {
                let exp = suffix.strip_prefix(['e', 'E'])?;
                let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                // Saturating: an exponent past i64 (`1e9223372036854775807` with a fraction)
                // only pins the value at the saturated bounds below.
                dec_exp = dec_exp.saturating_add(exp.parse::<i64>().ok()?);
            }
        }
        let mut nanos = mantissa.saturating_mul(1i128 << bin_exp);
        let scale = dec_exp.saturating_add(9);
        if scale >= 0 {
            for _ in 0..scale.min(60) {
                nanos = nanos.saturating_mul(10);
            }
        } else {
            let mut div: i128 = 1;
            for _ in 0..(-scale).min(38) {
                div = div.saturating_mul(10);
            }
            // Upstream rounds sub-nano precision up.
            // (Not `(nanos + div - 1) / div`: a saturated mantissa would overflow.)
            nanos = nanos / div + i128::from(nanos % div != 0);
        }
        Some(Quantity {
            nanos: if neg { -nanos } else { nanos },
        })
    }

    /// The value in nano-units.
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    /// Whether the quantity is zero.
    pub fn is_zero(self) -> bool {
        self.nanos == 0
    }

    /// Sum of two quantities (saturating).
    pub fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
        }
    }

    /// Compares two quantities, like upstream `Quantity.Cmp`.
    pub fn cmp_value(self, other: Quantity) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

/// Reads a quantity from JSON: a string, or a number (YAML `cpu: 1` arrives as a number).
pub fn from_value(v: &serde_json::Value) -> Option<Quantity> {
    match v {
        serde_json::Value::String(s) => Quantity::parse(s),
        serde_json::Value::Number(n) => Quantity::parse(&n.to_string()),
        _ => None,
    }
}

/// The text of a quantity value as a user wrote it.
pub fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_across_suffixes() {
        let q = |s| Quantity::parse(s).expect(s);
        assert_eq!(q("1Gi"), q("1024Mi"));
        assert_eq!(q(".1"), q("100m"));
        assert_eq!(q("1e3"), q("1k"));
        assert!(q("2").cmp_value(q("1500m")).is_gt());
        assert_eq!(q("-1").nanos(), -1_000_000_000);
        for bad in ["", "abc", "1.2.3", "1Qi", "1e", "--1", "."] {
            assert!(Quantity::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn huge_exponents_and_mantissas_saturate_instead_of_overflowing() {
        // Found by the property tests (crates/core/tests/fuzz_parsers.rs): each overflowed.
        let max = Quantity::parse("1e9223372036854775807").map(Quantity::nanos);
        assert_eq!(max, Some(i128::MAX));
        assert_eq!(
            Quantity::parse("0.1e-9223372036854775808").map(Quantity::nanos),
            Some(1)
        );
        assert_eq!(
            Quantity::parse("99999999999999999999999999999999999999999999e-20")
                .map(Quantity::nanos),
            Some(i128::MAX / 100_000_000_000 + 1)
        );
    }
}
