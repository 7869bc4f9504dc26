//! The client's HPACK table, followed as h2 follows it, at a cost fit for
//! every call: strings are decoded only when they enter the table or are
//! one of the two values admission reads (`:path`, `grpc-timeout`), and a
//! block written again as literals keeps each string as it came (Huffman
//! coded or not). (The `loona-hpack` decoder builds a Huffman table for
//! every coded string it meets: several times what a whole call costs.)

use super::rfc7541::{CODES, STATIC};
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::OnceLock;

/// A string as a header block carries it, or as the table holds it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Text<'a> {
    Plain(&'a [u8]),
    Huffman(&'a [u8]),
}

impl Text<'_> {
    /// The string's octets; `None` when its Huffman code is malformed.
    pub(crate) fn decode(&self) -> Option<Cow<'_, [u8]>> {
        match *self {
            Text::Plain(bytes) => Some(Cow::Borrowed(bytes)),
            Text::Huffman(code) => huffman_decode(code).map(Cow::Owned),
        }
    }

    /// Whether the string is `plain`, whose Huffman code is `coded`.
    pub(super) fn is(&self, plain: &[u8], coded: &[u8]) -> bool {
        match *self {
            Text::Plain(bytes) => bytes == plain,
            Text::Huffman(code) => code == coded,
        }
    }

    /// Writes the string as an HPACK string literal, coded as it was.
    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        let (flag, bytes) = match *self {
            Text::Plain(bytes) => (0, bytes),
            Text::Huffman(code) => (0x80, code),
        };
        encode_integer(out, bytes.len(), 7, flag);
        out.extend_from_slice(bytes);
    }
}

/// The fields admission reads, told apart when a name enters the table
/// (not compared on every call).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Path,
    Timeout,
    Other,
}

impl Kind {
    fn of(name: Text<'_>) -> Self {
        static CODED: OnceLock<(Vec<u8>, Vec<u8>)> = OnceLock::new();
        let (path, timeout) =
            CODED.get_or_init(|| (huffman_encode(b":path"), huffman_encode(b"grpc-timeout")));
        if name.is(b":path", path) {
            Self::Path
        } else if name.is(b"grpc-timeout", timeout) {
            Self::Timeout
        } else {
            Self::Other
        }
    }
}

/// A header block that does not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed;

/// A table entry: name, value, and the kind its name makes it.
type Entry = (Box<[u8]>, Box<[u8]>, Kind);

/// The client's dynamic table (RFC 7541 §4), newest entry first.
#[derive(Debug)]
pub(crate) struct Table {
    entries: VecDeque<Entry>,
    size: usize,
    max: usize,
    /// The most the client may size it to (the server's setting).
    allowed: usize,
}

impl Table {
    /// An empty table the client may size up to `allowed` octets.
    pub(crate) fn new(allowed: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            size: 0,
            max: allowed,
            allowed,
        }
    }

    fn get(&self, index: usize) -> Option<(&[u8], &[u8], Kind)> {
        match index {
            0 => None,
            // `:path` is static entries 4 and 5; `grpc-timeout` is not in
            // the static table.
            4 | 5 => STATIC.get(index - 1).map(|(n, v)| (*n, *v, Kind::Path)),
            1..=61 => STATIC.get(index - 1).map(|(n, v)| (*n, *v, Kind::Other)),
            _ => self
                .entries
                .get(index - 62)
                .map(|(n, v, kind)| (&n[..], &v[..], *kind)),
        }
    }

    fn insert(&mut self, name: Vec<u8>, value: Vec<u8>, kind: Kind) {
        self.size += name.len() + value.len() + 32;
        self.entries
            .push_front((name.into_boxed_slice(), value.into_boxed_slice(), kind));
        self.evict();
    }

    fn evict(&mut self) {
        while self.size > self.max {
            match self.entries.pop_back() {
                Some((n, v, _)) => self.size -= n.len() + v.len() + 32,
                None => break,
            }
        }
    }

    /// Reads one header block, calling `field` with each field's kind,
    /// name and value in order: every field when `all`, else only those
    /// whose kind is not [`Kind::Other`]. Returns whether the block
    /// changed the table.
    pub(crate) fn read(
        &mut self,
        mut block: &[u8],
        all: bool,
        mut field: impl FnMut(Kind, Text<'_>, Text<'_>),
    ) -> Result<bool, Malformed> {
        let mut changed = false;
        while let Some(&first) = block.first() {
            // The common fields of every call, told in a byte or two: a
            // static entry other than `:path` (4, 5), and a literal with
            // such a static name whose value nobody reads.
            if !all {
                let index = usize::from(first & 0x7f);
                if first & 0x80 != 0 && (1..=61).contains(&index) && index != 4 && index != 5 {
                    block = block.get(1..).ok_or(Malformed)?;
                    continue;
                }
                let index = usize::from(first);
                if first & 0xf0 == 0 && (1..15).contains(&index) && index != 4 && index != 5 {
                    let (len, used) = integer(block.get(1..).ok_or(Malformed)?, 7)?;
                    block = block.get(1 + used + len..).ok_or(Malformed)?;
                    continue;
                }
            }
            let used = if first & 0x80 != 0 {
                let (index, used) = integer(block, 7)?;
                let (name, value, kind) = self.get(index).ok_or(Malformed)?;
                if all || kind != Kind::Other {
                    field(kind, Text::Plain(name), Text::Plain(value));
                }
                used
            } else if first & 0xc0 == 0x40 {
                changed = true;
                let (kind, name, value, used) = self.literal(block, 6)?;
                let name = name.decode().ok_or(Malformed)?.into_owned();
                let value = value.decode().ok_or(Malformed)?.into_owned();
                if all || kind != Kind::Other {
                    field(kind, Text::Plain(&name), Text::Plain(&value));
                }
                self.insert(name, value, kind);
                used
            } else if first & 0xe0 == 0x20 {
                changed = true;
                let (max, used) = integer(block, 5)?;
                if max > self.allowed {
                    return Err(Malformed);
                }
                self.max = max;
                self.evict();
                used
            } else {
                let (kind, name, value, used) = self.literal(block, 4)?;
                if all || kind != Kind::Other {
                    field(kind, name, value);
                }
                used
            };
            block = block.get(used..).ok_or(Malformed)?;
        }
        Ok(changed)
    }

    /// A literal field: its kind, its name (from the table when indexed),
    /// its value, and the octets it took.
    fn literal<'a>(
        &'a self,
        block: &'a [u8],
        prefix: u8,
    ) -> Result<(Kind, Text<'a>, Text<'a>, usize), Malformed> {
        let (index, mut used) = integer(block, prefix)?;
        let (kind, name) = if index == 0 {
            let (name, n) = string(block.get(used..).ok_or(Malformed)?)?;
            used += n;
            (Kind::of(name), name)
        } else {
            let (name, _, kind) = self.get(index).ok_or(Malformed)?;
            (kind, Text::Plain(name))
        };
        let (value, n) = string(block.get(used..).ok_or(Malformed)?)?;
        Ok((kind, name, value, used + n))
    }
}

/// An HPACK integer with an `n`-bit prefix: (value, octets used).
#[inline]
fn integer(bytes: &[u8], prefix: u8) -> Result<(usize, usize), Malformed> {
    let mask = (1u16 << prefix) - 1;
    let first = u16::from(*bytes.first().ok_or(Malformed)?) & mask;
    if first < mask {
        return Ok((usize::from(first), 1));
    }
    let mut value = usize::from(mask);
    for (i, &b) in bytes.iter().enumerate().skip(1).take(4) {
        value += usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    Err(Malformed)
}

/// An HPACK string literal: the string and the octets it took.
fn string(bytes: &[u8]) -> Result<(Text<'_>, usize), Malformed> {
    let huffman = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let (len, used) = integer(bytes, 7)?;
    let octets = bytes.get(used..used + len).ok_or(Malformed)?;
    let text = if huffman {
        Text::Huffman(octets)
    } else {
        Text::Plain(octets)
    };
    Ok((text, used + len))
}

/// Appends an HPACK integer with an `n`-bit prefix whose upper bits are
/// `flags`.
pub(super) fn encode_integer(out: &mut Vec<u8>, mut value: usize, prefix: u8, flags: u8) {
    let mask = (1usize << prefix) - 1;
    if value < mask {
        out.push(flags | u8::try_from(value).unwrap_or(0));
        return;
    }
    out.push(flags | u8::try_from(mask).unwrap_or(0));
    value -= mask;
    while value >= 0x80 {
        out.push(u8::try_from(value & 0x7f).unwrap_or(0) | 0x80);
        value >>= 7;
    }
    out.push(u8::try_from(value).unwrap_or(0));
}

/// The codes of each length (5 to 30 bits), sorted, with their symbols.
fn by_length() -> &'static [Vec<(u32, u16)>] {
    static TABLE: OnceLock<Vec<Vec<(u32, u16)>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![Vec::new(); 31];
        for (symbol, &(code, len)) in (0u16..).zip(CODES.iter()) {
            if let Some(codes) = table.get_mut(usize::from(len)) {
                codes.push((code, symbol));
            }
        }
        for codes in &mut table {
            codes.sort_unstable();
        }
        table
    })
}

/// Decodes a Huffman-coded string (RFC 7541 §5.2): `None` when a code is
/// unknown, EOS appears, or the padding is not a short run of ones.
pub(super) fn huffman_decode(code: &[u8]) -> Option<Vec<u8>> {
    let table = by_length();
    let mut out = Vec::with_capacity(code.len() * 8 / 5);
    let (mut acc, mut len) = (0u32, 0usize);
    for byte in code {
        for bit in (0..8).rev() {
            acc = acc << 1 | u32::from(byte >> bit & 1);
            len += 1;
            let codes = table.get(len)?;
            if let Ok(i) = codes.binary_search_by_key(&acc, |&(c, _)| c) {
                let symbol = codes.get(i)?.1;
                out.push(u8::try_from(symbol).ok()?);
                (acc, len) = (0, 0);
            }
        }
    }
    (len < 8 && acc == (1 << len) - 1).then_some(out)
}

/// Huffman-codes `text` (RFC 7541 §5.2), padded with ones.
pub(crate) fn huffman_encode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let (mut acc, mut bits) = (0u64, 0u32);
    for &byte in text {
        let (code, len) = CODES.get(usize::from(byte)).copied().unwrap_or((0, 0));
        acc = acc << len | u64::from(code);
        bits += u32::from(len);
        while bits >= 8 {
            bits -= 8;
            out.push(u8::try_from(acc >> bits & 0xff).unwrap_or(0));
        }
    }
    if bits > 0 {
        let pad = 8 - bits;
        out.push(u8::try_from((acc << pad | ((1 << pad) - 1)) & 0xff).unwrap_or(0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;

    fn fields(table: &mut Table, block: &[u8]) -> (Fields, bool) {
        let mut out = Vec::new();
        let changed = table
            .read(block, true, |_, n, v| {
                out.push((
                    n.decode().unwrap().into_owned(),
                    v.decode().unwrap().into_owned(),
                ));
            })
            .unwrap();
        (out, changed)
    }

    #[test]
    fn huffman_codes_round_trip_and_match_the_rfc_example() {
        // RFC 7541 C.4.1: "www.example.com".
        let coded = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(huffman_decode(&coded).unwrap(), b"www.example.com");
        assert_eq!(huffman_encode(b"www.example.com"), coded);
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(huffman_decode(&huffman_encode(&all)).unwrap(), all);
        // Padding of zeros, or a whole byte of it, is refused.
        assert_eq!(huffman_decode(&[0x1f]).unwrap(), b"a");
        assert_eq!(huffman_decode(&[0x18]), None);
        assert_eq!(huffman_decode(&[0xff]), None);
    }

    #[test]
    fn the_table_follows_what_a_real_encoder_sends() {
        let mut encoder = loona_hpack::Encoder::new();
        let mut table = Table::new(4_096);
        let headers = [
            (&b":method"[..], &b"POST"[..]),
            (b":path", b"/a/b"),
            (b"x-id", b"1"),
            (b"grpc-timeout", b"20m"),
        ];
        for round in 0..3 {
            let block = encoder.encode(headers);
            let (got, changed) = fields(&mut table, &block);
            let want: Vec<(Vec<u8>, Vec<u8>)> = headers
                .iter()
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect();
            assert_eq!(got, want, "round {round}");
            assert_eq!(changed, round == 0, "round {round}");
        }
        // RFC 7541 C.4: requests with Huffman coding, the table evolving.
        let c41 = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        let c42 = [
            0x82, 0x86, 0x84, 0xbe, 0x58, 0x86, 0xa8, 0xeb, 0x10, 0x64, 0x9c, 0xbf,
        ];
        let mut table = Table::new(4_096);
        let (first, _) = fields(&mut table, &c41);
        assert_eq!(
            first[3],
            (b":authority".to_vec(), b"www.example.com".to_vec())
        );
        let (second, changed) = fields(&mut table, &c42);
        assert!(changed);
        assert_eq!(
            second[3],
            (b":authority".to_vec(), b"www.example.com".to_vec())
        );
        assert_eq!(second[4], (b"cache-control".to_vec(), b"no-cache".to_vec()));
        assert_eq!(table.size, 110);
        // A size update over the server's setting, an index past the table.
        assert_eq!(
            table.read(&[0x3f, 0xe2, 0x1f], true, |_, _, _| {}),
            Err(Malformed)
        );
        assert_eq!(
            table.read(&[0xff, 0x00], true, |_, _, _| {}),
            Err(Malformed)
        );
        // Kinds: static `:path`, and `grpc-timeout` as it entered the table.
        let mut kinds = Vec::new();
        let mut encoder = loona_hpack::Encoder::new();
        let mut table = Table::new(4_096);
        for _ in 0..2 {
            let block = encoder.encode([(&b":path"[..], &b"/x"[..]), (b"grpc-timeout", b"1S")]);
            table
                .read(&block, false, |kind, _, _| kinds.push(kind))
                .unwrap();
        }
        assert_eq!(
            kinds,
            [Kind::Path, Kind::Timeout, Kind::Path, Kind::Timeout]
        );
    }
}
