//! The caps on one payment given on the command line: dollars for the USDC rails,
//! SOL for the native SOL rail.

/// A cap on one payment, in the units of the rail it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxAmount {
    /// USD, in micro-dollars (= USDC base units): caps the USDC rails.
    Usd(u128),
    /// Native SOL, in lamports: caps the SOL rail.
    Lamports(u128),
}

impl std::str::FromStr for MaxAmount {
    type Err = String;

    /// `1.50` or `1.50usd` (dollars), `0.02sol` (SOL).
    fn from_str(s: &str) -> Result<Self, String> {
        let lower = s.trim().to_ascii_lowercase();
        let (number, sol) = match lower.strip_suffix("sol") {
            Some(n) => (n, true),
            None => (lower.strip_suffix("usd").unwrap_or(&lower), false),
        };
        let decimals = if sol { 9 } else { 6 };
        let units = decimal_units(number.trim(), decimals).ok_or_else(|| {
            format!("{s}: not an amount (dollars like 1.50, or SOL like 0.02sol)")
        })?;
        Ok(if sol {
            MaxAmount::Lamports(units)
        } else {
            MaxAmount::Usd(units)
        })
    }
}

/// `text` (a plain decimal) in units of 10^-`decimals`; None past that precision.
fn decimal_units(text: &str, decimals: u32) -> Option<u128> {
    let (int, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if int.is_empty() || !digits(int) || !digits(frac) || frac.len() > decimals as usize {
        return None;
    }
    let frac_units = format!("{frac:0<width$}", width = decimals as usize);
    int.parse::<u128>()
        .ok()?
        .checked_mul(10u128.pow(decimals))?
        .checked_add(frac_units.parse::<u128>().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_in_dollars_or_sol() {
        assert_eq!("1.50".parse(), Ok(MaxAmount::Usd(1_500_000)));
        assert_eq!("2usd".parse(), Ok(MaxAmount::Usd(2_000_000)));
        assert_eq!("0.02sol".parse(), Ok(MaxAmount::Lamports(20_000_000)));
        assert!("1.0000001".parse::<MaxAmount>().is_err());
        assert!("-1".parse::<MaxAmount>().is_err());
        assert!("".parse::<MaxAmount>().is_err());
    }
}
