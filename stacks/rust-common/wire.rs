//! What the Rust stacks' programs (stacks/quiche, stacks/quinn) read of the wire and of HTTP
//! alike, whatever their QUIC library: the 0-RTT packets in a sent datagram, the byte range a
//! Range header asks for, the access log's time. Included by each program as a module (`#[path]`), so neither crate
//! depends on the other, and each program uses what it needs of it.

/// The bytes of the QUIC v1 0-RTT packets in a datagram (long header, type 01), walking its
/// coalesced long-header packets by their Length fields (an Initial and a 0-RTT packet share
/// the first datagram): the packets' size, as every stack client counts `early_data_bytes`.
pub fn zero_rtt_bytes(d: &[u8]) -> usize {
    fn varint(b: &[u8]) -> Option<(usize, usize)> {
        let first = *b.first()?;
        let n = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for byte in b.get(1..n)? {
            v = (v << 8) | u64::from(*byte);
        }
        Some((v as usize, n))
    }
    let mut total = 0;
    let mut i = 0;
    while let Some(&first) = d.get(i) {
        if first & 0x80 == 0 {
            break; // a short-header packet takes the rest
        }
        let ty = (first & 0x30) >> 4;
        let mut p = i + 5; // flags, version
        let Some(&dcil) = d.get(p) else { break };
        p += 1 + dcil as usize;
        let Some(&scil) = d.get(p) else { break };
        p += 1 + scil as usize;
        if ty == 0 {
            let Some((token, n)) = d.get(p..).and_then(varint) else {
                break;
            };
            p += n + token;
        }
        let Some((len, n)) = d.get(p..).and_then(varint) else {
            break;
        };
        let end = p + n + len;
        if ty == 1 {
            total += end.min(d.len()) - i;
        }
        i = end;
    }
    total
}

/// The one byte range a GET's `Range` header asks of a file of `total` bytes (RFC 9110 §14):
/// `Some(Ok((first, last)))` for a satisfiable range (206), `Some(Err(()))` for an
/// unsatisfiable one (416), None to ignore the header and send the whole file (200): several
/// ranges, a unit other than bytes, anything malformed.
pub fn byte_range(value: &str, total: u64) -> Option<Result<(u64, u64), ()>> {
    let (unit, spec) = value.trim().split_once('=')?;
    if !unit.eq_ignore_ascii_case("bytes") || spec.contains(',') {
        return None;
    }
    let (a, b) = spec.trim().split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    // Past u64: a first byte beyond any file, a last byte or suffix longer than any.
    let number = |s: &str| s.parse::<u64>().unwrap_or(u64::MAX);
    if a.is_empty() {
        // bytes=-N: the last N bytes (all of a shorter file); N = 0 selects nothing.
        if !digits(b) {
            return None;
        }
        let n = number(b);
        return match (n, total) {
            (0, _) => Some(Err(())),
            (_, 0) => None, // no byte to name in a content-range: the (empty) whole file
            _ => Some(Ok((total - n.min(total), total - 1))),
        };
    }
    if !digits(a) || !(b.is_empty() || digits(b)) {
        return None;
    }
    let first = number(a);
    let last = if b.is_empty() { u64::MAX } else { number(b) };
    if last < first {
        return None; // invalid: ignored
    }
    if first >= total {
        return Some(Err(()));
    }
    Some(Ok((first, last.min(total - 1))))
}

/// RFC 3339 UTC time of a UNIX time in seconds, as nginx's $time_iso8601 (the servers' access
/// logs; no date crate needed).
pub fn iso8601(secs: i64) -> String {
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's civil_from_days).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}+00:00",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// A request path's %XX escapes decoded (None: a malformed escape); the servers then take it
/// as UTF-8 and look it up under their root.
pub fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}
