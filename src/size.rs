//! Sizes as people write them: `4096`, `4k`, `128KiB`, `1G`, `512M`.
//! Parsing and showing only; it must never decide what a size is for.

/// Why a size did not parse; each says what was given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    #[error("{0:?} is not a size (e.g. 4096, 128k, 1G)")]
    NotASize(String),
    #[error("{given:?}: unknown unit {unit:?} (use k, M, G or T)")]
    UnknownUnit { given: String, unit: String },
    #[error("{0:?} is too large")]
    TooLarge(String),
}

/// Parse a byte count with an optional binary suffix (k, M, G, T; "iB" and
/// "B" are accepted and mean the same).
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(digits);
    let n: u64 = num.parse().map_err(|_| SizeError::NotASize(s.into()))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(SizeError::UnknownUnit { given: s.into(), unit: unit.into() }),
    };
    n.checked_mul(1 << shift).ok_or_else(|| SizeError::TooLarge(s.into()))
}

/// Show a byte count the way `parse_size` reads it back, e.g. "128k".
pub fn format_size(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "k")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("128KiB"), Ok(128 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("12q").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(format_size(128 << 10), "128k");
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(1000), "1000");
    }
}
