//! The caller's trace, from the headers Envoy sends: W3C `traceparent` (and
//! `tracestate`), B3 single (`b3`) and B3 multi (`x-b3-traceid`,
//! `x-b3-spanid`, `x-b3-sampled`, `x-b3-flags`). As the reference's
//! composite propagator (tracecontext, then B3), a valid B3 context wins
//! over `traceparent` when a caller sends both.

use opentelemetry::propagation::{Extractor, TextMapPropagator as _};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId};
use opentelemetry::{Context, trace::TraceState};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::marker::PhantomData;

/// The remote parent found in `header` (a lookup by lowercase name), or an
/// empty context when there is none.
pub(crate) fn extract<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Context {
    if let Some(parent) = b3(&header) {
        return Context::new().with_remote_span_context(parent);
    }
    TraceContextPropagator::new().extract(&Lookup {
        header,
        data: PhantomData,
    })
}

/// [`Extractor`] over a header lookup; `keys` is never needed by the
/// trace-context propagator.
struct Lookup<'a, F> {
    header: F,
    data: PhantomData<&'a str>,
}

impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for Lookup<'a, F> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.header)(key)
    }

    fn keys(&self) -> Vec<&str> {
        Vec::new()
    }
}

/// A B3 context: the single header first, else the multi headers.
fn b3<'a>(header: &impl Fn(&str) -> Option<&'a str>) -> Option<SpanContext> {
    if let Some(single) = header("b3") {
        return b3_single(single);
    }
    let trace_id = b3_trace_id(header("x-b3-traceid")?)?;
    let span_id = b3_span_id(header("x-b3-spanid")?)?;
    // `x-b3-flags: 1` is debug, which implies sampled.
    let sampled =
        header("x-b3-flags") == Some("1") || matches!(header("x-b3-sampled"), Some("1" | "true"));
    Some(remote(trace_id, span_id, sampled))
}

/// `{trace id}-{span id}[-{sampling state}[-{parent span id}]]`; a bare
/// sampling state carries no context.
fn b3_single(value: &str) -> Option<SpanContext> {
    let mut parts = value.trim().split('-');
    let trace_id = b3_trace_id(parts.next()?)?;
    let span_id = b3_span_id(parts.next()?)?;
    let sampled = match parts.next() {
        // Deferred: no decision from the caller; as the reference, not
        // sampled (a parent-based sampler then drops it).
        None => false,
        Some("1" | "d") => true,
        Some("0") => false,
        Some(_) => return None,
    };
    if let Some(parent) = parts.next() {
        b3_span_id(parent)?;
    }
    if parts.next().is_some() {
        return None;
    }
    Some(remote(trace_id, span_id, sampled))
}

/// 32 or 16 lowercase hex digits (a 64-bit id is left-padded); not all 0.
fn b3_trace_id(text: &str) -> Option<TraceId> {
    let valid = matches!(text.len(), 16 | 32) && is_lower_hex(text);
    let id = TraceId::from_hex(text).ok().filter(|_| valid)?;
    (id != TraceId::INVALID).then_some(id)
}

/// 16 lowercase hex digits; not all 0.
fn b3_span_id(text: &str) -> Option<SpanId> {
    let valid = text.len() == 16 && is_lower_hex(text);
    let id = SpanId::from_hex(text).ok().filter(|_| valid)?;
    (id != SpanId::INVALID).then_some(id)
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn remote(trace_id: TraceId, span_id: SpanId, sampled: bool) -> SpanContext {
    let flags = if sampled {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    SpanContext::new(trace_id, span_id, flags, true, TraceState::default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn parent(headers: &[(&str, &str)]) -> Option<(String, String, bool)> {
        let map: HashMap<&str, &str> = headers.iter().copied().collect();
        let cx = extract(|name| map.get(name).copied());
        let span = cx.span();
        let sc = span.span_context();
        sc.is_valid().then(|| {
            assert!(sc.is_remote());
            (
                sc.trace_id().to_string(),
                sc.span_id().to_string(),
                sc.is_sampled(),
            )
        })
    }

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";

    fn expect(sampled: bool) -> Option<(String, String, bool)> {
        Some((TRACE.to_owned(), SPAN.to_owned(), sampled))
    }

    #[test]
    fn reads_w3c_traceparent() {
        let tp = format!("00-{TRACE}-{SPAN}-01");
        assert_eq!(parent(&[("traceparent", &tp)]), expect(true));
        let tp = format!("00-{TRACE}-{SPAN}-00");
        assert_eq!(parent(&[("traceparent", &tp)]), expect(false));
        assert_eq!(parent(&[("traceparent", "00-zz-yy-01")]), None);
        assert_eq!(parent(&[]), None);
    }

    #[test]
    fn reads_b3_single_and_multi() {
        let single = format!("{TRACE}-{SPAN}-1");
        assert_eq!(parent(&[("b3", &single)]), expect(true));
        let debug = format!("{TRACE}-{SPAN}-d-0000000000000001");
        assert_eq!(parent(&[("b3", &debug)]), expect(true));
        let deferred = format!("{TRACE}-{SPAN}");
        assert_eq!(parent(&[("b3", &deferred)]), expect(false));
        assert_eq!(
            parent(&[
                ("x-b3-traceid", TRACE),
                ("x-b3-spanid", SPAN),
                ("x-b3-sampled", "1"),
            ]),
            expect(true)
        );
        assert_eq!(
            parent(&[
                ("x-b3-traceid", TRACE),
                ("x-b3-spanid", SPAN),
                ("x-b3-flags", "1")
            ]),
            expect(true)
        );
        assert_eq!(
            parent(&[("x-b3-traceid", TRACE), ("x-b3-spanid", SPAN)]),
            expect(false)
        );
    }

    #[test]
    fn pads_64_bit_b3_trace_ids() {
        let single = format!("a3ce929d0e0e4736-{SPAN}-1");
        assert_eq!(
            parent(&[("b3", &single)]),
            Some((
                "0000000000000000a3ce929d0e0e4736".to_owned(),
                SPAN.to_owned(),
                true
            ))
        );
    }

    #[test]
    fn refuses_malformed_b3() {
        for bad in [
            "0",
            "1",
            "",
            "xyz-00f067aa0ba902b7-1",
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-2",
            "4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-1",
            "00000000000000000000000000000000-00f067aa0ba902b7-1",
            "4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-1",
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1-bad",
            "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1-0000000000000001-x",
            "4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-1",
        ] {
            assert_eq!(parent(&[("b3", bad)]), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        #[test]
        fn every_form_carries_the_same_ids(
            trace in 1u128..,
            span in 1u64..,
            sampled: bool,
        ) {
            let (t, sp) = (format!("{trace:032x}"), format!("{span:016x}"));
            let want = Some((t.clone(), sp.clone(), sampled));
            let flag = if sampled { "1" } else { "0" };
            let tp = format!("00-{t}-{sp}-0{flag}");
            proptest::prop_assert_eq!(&parent(&[("traceparent", &tp)]), &want);
            let single = format!("{t}-{sp}-{flag}");
            proptest::prop_assert_eq!(&parent(&[("b3", &single)]), &want);
            proptest::prop_assert_eq!(
                parent(&[("x-b3-traceid", &t), ("x-b3-spanid", &sp), ("x-b3-sampled", flag)]),
                want
            );
        }

        #[test]
        fn any_header_value_is_read_without_panicking(
            value in "[0-9a-fA-Fxz -]{0,80}",
            name in proptest::sample::select(vec![
                "traceparent", "tracestate", "b3", "x-b3-traceid", "x-b3-spanid",
                "x-b3-sampled", "x-b3-flags",
            ]),
        ) {
            let _ = parent(&[(name, &value)]);
            let _ = parent(&[("x-b3-traceid", &value), ("x-b3-spanid", &value)]);
        }
    }

    #[test]
    fn b3_wins_over_traceparent_as_in_the_reference() {
        let tp = "00-11111111111111111111111111111111-2222222222222222-01";
        let single = format!("{TRACE}-{SPAN}-1");
        assert_eq!(
            parent(&[("traceparent", tp), ("b3", &single)]),
            expect(true)
        );
        // An invalid B3 header leaves the W3C parent.
        let got = parent(&[("traceparent", tp), ("b3", "garbage")]).unwrap();
        assert_eq!(got.0, "11111111111111111111111111111111");
    }
}
