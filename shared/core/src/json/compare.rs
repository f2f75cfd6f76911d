//! Comparing JSON numbers and values as Python compares them: integers exactly, floats as
//! doubles.

use super::encode::python_float_repr;
use super::{Number, Value};

/// A number as sign, significant digits and a decimal exponent: value = 0.DIGITS × 10^exp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decimal {
    negative: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Decimal {
    fn from_number(n: &Number) -> Decimal {
        let text = match n {
            Number::Int(t) => t.to_string(),
            // The shortest round-trip digits: what the number means to a JSON reader.
            Number::Float(f) => python_float_repr(*f),
        };
        Decimal::from_text(&text)
    }

    fn from_text(text: &str) -> Decimal {
        let (negative, rest) = match text.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, text),
        };
        let (mant, exp) = match rest.split_once(['e', 'E']) {
            Some((m, e)) => (m, e.parse::<i64>().unwrap_or(0)),
            None => (rest, 0),
        };
        let (int_part, frac_part) = mant.split_once('.').unwrap_or((mant, ""));
        let mut digits: Vec<u8> = int_part
            .bytes()
            .chain(frac_part.bytes())
            .map(|b| b - b'0')
            .collect();
        let mut point = int_part.len() as i64 + exp;
        while digits.first() == Some(&0) {
            digits.remove(0);
            point -= 1;
        }
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            return Decimal {
                negative: false,
                digits,
                exp: 0,
            };
        }
        Decimal {
            negative,
            digits,
            exp: point,
        }
    }

    fn cmp_magnitude(&self, other: &Decimal) -> std::cmp::Ordering {
        match (self.digits.is_empty(), other.digits.is_empty()) {
            (true, true) => return std::cmp::Ordering::Equal,
            (true, false) => return std::cmp::Ordering::Less,
            (false, true) => return std::cmp::Ordering::Greater,
            _ => {}
        }
        self.exp
            .cmp(&other.exp)
            .then_with(|| self.digits.cmp(&other.digits))
    }
}

/// Exact numeric ordering of two JSON numbers.
pub fn compare_numbers(a: &Number, b: &Number) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    let (a, b) = (Decimal::from_number(a), Decimal::from_number(b));
    let sign = |d: &Decimal| {
        if d.digits.is_empty() {
            0
        } else if d.negative {
            -1
        } else {
            1
        }
    };
    match sign(&a).cmp(&sign(&b)) {
        Equal => {}
        other => return other,
    }
    let m = a.cmp_magnitude(&b);
    if sign(&a) < 0 {
        match m {
            Less => Greater,
            Greater => Less,
            Equal => Equal,
        }
    } else {
        m
    }
}

/// JSON equality where numbers compare by value (1 == 1.0) at every depth.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y) == std::cmp::Ordering::Equal,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k1, v1), (k2, v2))| k1 == k2 && json_equal(v1, v2))
        }
        _ => a == b,
    }
}
