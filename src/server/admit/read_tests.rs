use super::*;
use crate::limiter::FailureMode;
use crate::server::admit::answer::{ShedAnswer, push_frame};
use std::cell::Cell;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Admission that sheds calls whose timeout is under 1 s, and counts.
struct Test {
    answer: ShedAnswer,
    shed: Cell<u32>,
}

impl Test {
    fn new(mode: FailureMode) -> Self {
        Self {
            answer: ShedAnswer::new(mode, "shed"),
            shed: Cell::new(0),
        }
    }
}

impl Admit for Test {
    fn sheds(&self, timeout: Option<Duration>, _: usize) -> bool {
        timeout.is_some_and(|t| t < Duration::from_secs(1))
    }
    fn answer(&self, stream: u32, _: Option<Duration>, out: &mut Vec<u8>) {
        self.shed.set(self.shed.get() + 1);
        self.answer.write(stream, out);
    }
    fn answer_data(&self) -> u32 {
        self.answer.data_len()
    }
}

impl Reader {
    /// Processes `input` as far as whole frames allow (header blocks,
    /// SETTINGS and WINDOW_UPDATE frames are read whole): bytes for h2 to
    /// `out`, frames for the client to `inject`. Returns how many bytes of
    /// `input` were processed; the rest comes again with more. (What
    /// `process_in_place` passed in place is copied to `out` too.)
    fn process(
        &mut self,
        input: &[u8],
        out: &mut Vec<u8>,
        inject: &mut Vec<u8>,
        admit: &dyn Admit,
    ) -> usize {
        let processed = self.process_in_place(input, out, inject, admit);
        if processed.in_place {
            out.extend_from_slice(input.get(..processed.used).unwrap_or_default());
        }
        processed.used
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    push_frame(&mut out, kind, flags, stream, payload);
    out
}

/// (kind, flags, stream, payload) of each frame in `bytes`.
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= FRAME_HEAD {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
        out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

/// A client's encoder: indexes every header, as Envoy's and grpc-go's do.
struct Client {
    encoder: loona_hpack::Encoder<'static>,
}

impl Client {
    fn new() -> Self {
        Self {
            encoder: loona_hpack::Encoder::new(),
        }
    }

    /// A unary call on `stream`: HEADERS (with `timeout` and `extra`
    /// headers), then DATA ending the stream.
    fn call(&mut self, stream: u32, timeout: &str, path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
        let mut headers: Vec<(&[u8], &[u8])> = vec![
            (b":method", b"POST"),
            (b":scheme", b"http"),
            (b":path", path.as_bytes()),
            (b":authority", b"rls"),
            (b"content-type", b"application/grpc"),
            (b"grpc-timeout", timeout.as_bytes()),
        ];
        headers.extend(extra.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        let block = self.encoder.encode(headers);
        let mut out = frame(HEADERS, END_HEADERS, stream, &block);
        out.extend(frame(
            DATA,
            END_STREAM,
            stream,
            &[0, 0, 0, 0, 3, 10, 1, b'd'],
        ));
        out
    }
}

/// Runs `input` through a reader in pieces of `step` bytes: (for h2, for
/// the client).
fn run(reader: &mut Reader, admit: &Test, input: &[u8], step: usize) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut inject, mut raw) = (Vec::new(), Vec::new(), Vec::new());
    for piece in input.chunks(step) {
        raw.extend_from_slice(piece);
        let used = reader.process(&raw, &mut out, &mut inject, admit);
        raw.drain(..used);
    }
    assert!(raw.is_empty(), "left over: {raw:?}");
    (out, inject)
}

/// The headers of every HEADERS block in `bytes`, decoded in order with
/// one table (as h2 decodes them).
fn decode_all(bytes: &[u8]) -> Vec<(u32, Vec<(String, String)>)> {
    let mut decoder = loona_hpack::Decoder::new();
    frames(bytes)
        .into_iter()
        .filter(|f| f.0 == HEADERS)
        .map(|(_, _, stream, block)| {
            let headers = decoder
                .decode(&block)
                .unwrap()
                .into_iter()
                .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
                .collect();
            (stream, headers)
        })
        .collect()
}

const RLS: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

#[test]
fn shed_calls_never_reach_h2_and_the_rest_decode_as_sent() {
    for step in [1, 7, 64, 100_000] {
        let admit = Test::new(FailureMode::Error);
        let mut client = Client::new();
        let mut input = PREFACE.to_vec();
        input.extend(frame(SETTINGS, 0, 0, &[]));
        // 1 kept, 3 shed (its first block indexes everything), 5 kept with
        // a header the shed block did not have, 7 shed, 9 kept; 11 is a
        // health check with a short deadline: kept (only RLS calls shed).
        input.extend(client.call(1, "5S", RLS, &[]));
        input.extend(client.call(3, "20m", RLS, &[("x-request-id", "a")]));
        input.extend(client.call(5, "5S", RLS, &[("x-request-id", "b")]));
        input.extend(client.call(7, "1n", RLS, &[("x-request-id", "a")]));
        input.extend(client.call(9, "5S", RLS, &[("x-request-id", "a")]));
        input.extend(client.call(11, "1n", "/grpc.health.v1.Health/Check", &[]));
        let mut reader = Reader::default();
        let (out, inject) = run(&mut reader, &admit, &input, step);
        assert!(out.starts_with(PREFACE));
        let h2 = &out[PREFACE.len()..];
        let seen: Vec<u32> = frames(h2).iter().map(|f| f.2).collect();
        assert_eq!(seen, [0, 1, 1, 5, 5, 9, 9, 11, 11], "step {step}");
        // h2's decoder reads every block it gets, with the headers sent.
        let decoded = decode_all(h2);
        let id = |i: usize| {
            decoded[i]
                .1
                .iter()
                .find(|(n, _)| n == "x-request-id")
                .map(|(_, v)| v.clone())
        };
        assert_eq!(decoded.len(), 4);
        assert_eq!(
            (id(0), id(1), id(2)),
            (None, Some("b".into()), Some("a".into()))
        );
        assert!(
            reader.diverged,
            "the shed block indexed headers h2 never saw"
        );
        // The client got 3's and 7's answers, and its window back.
        let answered: Vec<(u8, u32)> = frames(&inject).iter().map(|f| (f.0, f.2)).collect();
        assert!(answered.contains(&(HEADERS, 3)) && answered.contains(&(HEADERS, 7)));
        let returned: u32 = frames(&inject)
            .iter()
            .filter(|f| f.0 == WINDOW_UPDATE)
            .map(|f| u32::from_be_bytes(f.3[..4].try_into().unwrap()))
            .sum();
        assert_eq!(returned, 2 * 8, "the shed calls' DATA given back");
        assert_eq!(admit.shed.get(), 2);
    }
}

#[test]
fn without_a_table_change_the_blocks_pass_untouched() {
    let admit = Test::new(FailureMode::Error);
    let mut client = Client::new();
    let mut input = PREFACE.to_vec();
    input.extend(client.call(1, "5S", RLS, &[]));
    let mut reader = Reader::default();
    let (out, _) = run(&mut reader, &admit, &input, 1000);
    assert_eq!(out, input, "passed as read");
    // grpc-timeout's name is in the table now; a new value for it is
    // sent as a literal that enters no table: shedding 3 changes nothing.
    let shed = client.call(3, "20m", RLS, &[]);
    let kept = client.call(5, "5S", RLS, &[]);
    let (out, inject) = run(&mut reader, &admit, &[shed, kept.clone()].concat(), 1000);
    assert!(!reader.diverged);
    assert_eq!(out, kept, "passed as read");
    assert_eq!(frames(&inject)[0].2, 3);
    // A first call shed with the headers it indexed: h2's table is behind.
    let mut reader = Reader::default();
    let mut client = Client::new();
    let input = [PREFACE.to_vec(), client.call(1, "20m", RLS, &[])].concat();
    let (out, _) = run(&mut reader, &admit, &input, 1000);
    assert!(reader.diverged);
    assert_eq!(out, PREFACE);
    // Then a kept call is written as literals h2 decodes on its own.
    let (out, _) = run(&mut reader, &admit, &client.call(3, "5S", RLS, &[]), 1000);
    let decoded = decode_all(&out);
    assert_eq!(decoded[0].0, 3);
    assert!(decoded[0].1.contains(&(":path".to_owned(), RLS.to_owned())));
    assert!(
        decoded[0]
            .1
            .contains(&("grpc-timeout".to_owned(), "5S".to_owned()))
    );
}

#[test]
fn what_passes_as_read_is_not_copied_and_a_shed_call_copies_the_rest() {
    let admit = Test::new(FailureMode::Error);
    let mut client = Client::new();
    let mut reader = Reader::default();
    let (mut out, mut inject) = (Vec::new(), Vec::new());
    let kept = [PREFACE.to_vec(), client.call(1, "5S", RLS, &[])].concat();
    // An incomplete frame at the end waits for more, still in place.
    let input = [&kept[..], &client.call(3, "5S", RLS, &[])[..4]].concat();
    let processed = reader.process_in_place(&input, &mut out, &mut inject, &admit);
    assert!(processed.in_place);
    assert_eq!(processed.used, kept.len());
    assert!(out.is_empty(), "nothing copied");
    // A shed call between two kept ones: the kept ones' bytes, in order.
    let mut reader = Reader::default();
    let mut client = Client::new();
    let first = [PREFACE.to_vec(), client.call(1, "5S", RLS, &[])].concat();
    // grpc-timeout's new value enters no table: h2's table still follows.
    let shed = client.call(3, "20m", RLS, &[]);
    let last = client.call(5, "5S", RLS, &[]);
    let input = [&first[..], &shed[..], &last[..]].concat();
    let processed = reader.process_in_place(&input, &mut out, &mut inject, &admit);
    assert!(!processed.in_place);
    assert_eq!(processed.used, input.len());
    assert!(!reader.diverged);
    assert_eq!(out, [&first[..], &last[..]].concat());
    assert_eq!(admit.shed.get(), 1);
}

#[test]
fn allow_answers_spend_a_reserve_taken_from_the_clients_window_updates() {
    let admit = Test::new(FailureMode::Allow);
    let mut client = Client::new();
    let mut input = PREFACE.to_vec();
    // No window update yet: no reserve, the call is kept.
    input.extend(client.call(1, "20m", RLS, &[]));
    input.extend(frame(WINDOW_UPDATE, 0, 0, &100_000u32.to_be_bytes()));
    input.extend(client.call(3, "20m", RLS, &[]));
    let mut reader = Reader::default();
    let (out, inject) = run(&mut reader, &admit, &input, 5);
    let to_h2 = frames(&out[PREFACE.len()..]);
    let update = to_h2.iter().find(|f| f.0 == WINDOW_UPDATE).unwrap();
    assert_eq!(
        u32::from_be_bytes(update.3[..4].try_into().unwrap()),
        100_000 - RESERVE
    );
    assert!(to_h2.iter().all(|f| f.2 != 3));
    assert!(frames(&inject).iter().any(|f| f.0 == DATA && f.2 == 3));
    assert_eq!(reader.reserve, RESERVE - 7);
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600), step in 1usize..64) {
        let admit = Test::new(FailureMode::Deny);
        let mut input = PREFACE.to_vec();
        input.extend(bytes);
        let (mut out, mut inject, mut raw) = (Vec::new(), Vec::new(), Vec::new());
        let mut reader = Reader::default();
        for piece in input.chunks(step) {
            raw.extend_from_slice(piece);
            let used = reader.process(&raw, &mut out, &mut inject, &admit);
            proptest::prop_assert!(used <= raw.len());
            raw.drain(..used);
        }
    }
}

proptest::proptest! {
    /// Calls as a real encoder sends them (repeated blocks, blocks that
    /// change the table, shed ones among them): each is shed exactly when
    /// the rule says, whether its block was walked or recognised.
    #[test]
    fn every_call_is_judged_by_its_own_headers(
        calls in proptest::collection::vec((0usize..2, 0usize..3, 0usize..4), 1..40),
        step in proptest::sample::select(vec![1usize, 9, 100_000]),
    ) {
        let admit = Test::new(FailureMode::Error);
        let mut client = Client::new();
        let mut input = PREFACE.to_vec();
        let mut kept = Vec::new();
        for (n, &(path, timeout, extra)) in calls.iter().enumerate() {
            let stream = 2 * u32::try_from(n).unwrap() + 1;
            let path = [RLS, "/grpc.health.v1.Health/Check"][path];
            let timeout = ["5S", "20m", "1n"][timeout];
            let extra: &[(&str, &str)] = match extra {
                0 => &[],
                1 => &[("x-request-id", "a")],
                2 => &[("x-request-id", "b")],
                _ => &[("x-tenant", "t")],
            };
            input.extend(client.call(stream, timeout, path, extra));
            if path != RLS || timeout == "5S" {
                kept.push(stream);
            }
        }
        let mut reader = Reader::default();
        let (out, _) = run(&mut reader, &admit, &input, step);
        let mut seen: Vec<u32> = frames(&out[PREFACE.len()..])
            .iter()
            .filter(|f| f.0 == HEADERS)
            .map(|f| f.2)
            .collect();
        seen.dedup();
        proptest::prop_assert_eq!(&seen, &kept);
        proptest::prop_assert_eq!(admit.shed.get() as usize, calls.len() - kept.len());
        // h2 reads every block it gets, each with its own headers.
        for (stream, headers) in decode_all(&out[PREFACE.len()..]) {
            let n = (stream as usize - 1) / 2;
            let path = [RLS, "/grpc.health.v1.Health/Check"][calls[n].0];
            proptest::prop_assert!(headers.contains(&(":path".to_owned(), path.to_owned())));
        }
    }
}

#[test]
fn a_block_recognised_means_what_it_meant_only_while_the_table_is_unchanged() {
    fn text(out: &mut Vec<u8>, s: &str) {
        out.push(u8::try_from(s.len()).unwrap());
        out.extend_from_slice(s.as_bytes());
    }
    let block =
        |stream: u32, fields: &[u8]| frame(HEADERS, END_HEADERS | END_STREAM, stream, fields);
    // 1 indexes "grpc-timeout: 5S" then ":path: RLS": the table is
    // [62] RLS, [63] 5S. 3 is those two indexed: kept, and remembered.
    let mut first = vec![0x40];
    text(&mut first, "grpc-timeout");
    text(&mut first, "5S");
    first.push(0x44);
    text(&mut first, RLS);
    let same = [0x80 | 62, 0x80 | 63];
    // 5, a health check, indexes "grpc-timeout: 20m": now [62] is 20m
    // and [63] RLS, so 7, the same bytes as 3, is an RLS call with 20 ms.
    let mut health = vec![0x04];
    text(&mut health, "/grpc.health.v1.Health/Check");
    health.push(0x40);
    text(&mut health, "grpc-timeout");
    text(&mut health, "20m");
    let input = [
        PREFACE.to_vec(),
        block(1, &first),
        block(3, &same),
        block(5, &health),
        block(7, &same),
    ]
    .concat();
    let admit = Test::new(FailureMode::Error);
    let (out, inject) = run(&mut Reader::default(), &admit, &input, 100_000);
    let seen: Vec<u32> = frames(&out[PREFACE.len()..]).iter().map(|f| f.2).collect();
    assert_eq!(seen, [1, 3, 5]);
    assert_eq!(frames(&inject)[0].2, 7);
}
