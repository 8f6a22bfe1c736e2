//! The one wall clock of the sidecar: Unix milliseconds, as rows, events
//! and signed envelopes (`ts`) carry them.

/// Milliseconds since the Unix epoch (0 before it, `i64::MAX` past it).
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
