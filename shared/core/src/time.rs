//! RFC 3339 timestamps in UTC, second precision: what documents carry. Reading the
//! clock is `umpire-host`'s job; here times come in as unix seconds.

/// `2026-12-02T15:04:05Z`
pub fn rfc3339(unix: u64) -> String {
    let days = (unix / 86_400) as i64;
    let secs = unix % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Unix seconds of an RFC 3339 timestamp (`2026-12-02T15:04:05Z`, with or without a
/// fraction, `Z` or a numeric offset), fractions dropped; None for anything else or a
/// time before 1970.
pub fn parse_rfc3339(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = text.get(from..from + len)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (y, m, d) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hh, mm, ss) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 60 {
        return None;
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let digits = |r: std::ops::Range<usize>| {
                rest.get(r)
                    .filter(|p| p.bytes().all(|c| c.is_ascii_digit()))?
                    .parse::<i64>()
                    .ok()
            };
            let (oh, om) = (digits(1..3)?, digits(4..6)?);
            sign * (oh * 3600 + om * 60)
        }
    };
    let days = days_from_civil(y, m as u32, d as u32);
    let unix = days * 86_400 + hh * 3600 + mm * 60 + ss - offset;
    u64::try_from(unix).ok()
}

/// Howard Hinnant's days-from-civil algorithm (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_796_223_845), "2026-12-02T15:04:05Z");
    }

    #[test]
    fn reads_what_it_writes_and_what_javascript_writes() {
        for t in [0, 951_782_400, 1_796_223_845, 4_102_444_800] {
            assert_eq!(super::parse_rfc3339(&super::rfc3339(t)), Some(t));
        }
        // Date.prototype.toISOString, and offsets.
        assert_eq!(
            super::parse_rfc3339("2026-12-02T15:04:05.123Z"),
            Some(1_796_223_845)
        );
        assert_eq!(
            super::parse_rfc3339("2026-12-02T16:04:05+01:00"),
            Some(1_796_223_845)
        );
        for bad in [
            "",
            "2026-12-02",
            "2026-13-02T15:04:05Z",
            "2026-12-02T15:04:05",
            "2026-12-02T15:04:05.Z",
            "1969-12-31T23:59:59Z",
            "2026-12-02T15:04:05+0100",
        ] {
            assert_eq!(super::parse_rfc3339(bad), None, "{bad}");
        }
    }
}
