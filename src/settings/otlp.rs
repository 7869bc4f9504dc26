//! Tracing settings: the reference's `TRACING_*` variables and the standard
//! `OTEL_EXPORTER_OTLP_*` ones for the endpoint and headers (signal-specific
//! `…_TRACES_…` first, then the generic variable, then the default).

use super::parse::{boolean, choice, pick};
use super::vars;
use super::{ServeArgs, SettingsError, TracingExporterProtocol};
use crate::otel::{DEFAULT_SERVICE_NAME, ExportProtocol, TracingSettings};
use std::time::Duration;

/// Default collector of each protocol (the OTLP specification's).
const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
/// `otel_bsp_schedule_delay`'s default.
const DEFAULT_EXPORT_INTERVAL: Duration = Duration::from_secs(5);

/// Resolves the tracing settings; `None` unless `tracing_enabled`.
pub(super) fn tracing_settings<'a>(
    args: &ServeArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<TracingSettings>, SettingsError> {
    if !boolean(
        args.tracing_enabled,
        get(vars::tracing_enabled.name),
        vars::tracing_enabled.name,
    )? {
        return Ok(None);
    }
    let protocol = match choice(
        args.tracing_exporter_protocol,
        get(vars::tracing_exporter_protocol.name),
        vars::tracing_exporter_protocol.name,
        "http or grpc",
        TracingExporterProtocol::Http,
    )? {
        TracingExporterProtocol::Http => ExportProtocol::Http,
        TracingExporterProtocol::Grpc => ExportProtocol::Grpc,
    };
    let text =
        |flag: &Option<String>, var: &str| flag.clone().or_else(|| get(var).map(str::to_owned));
    let sampling_rate = pick(
        args.tracing_sampling_rate,
        get(vars::tracing_sampling_rate.name),
        vars::tracing_sampling_rate.name,
        "a number such as 0.1 (1 samples every trace)",
        |t| t.trim().parse::<f64>().ok().filter(|r| r.is_finite()),
        1.0,
    )?;
    let export_interval = pick(
        None,
        get(vars::otel_bsp_schedule_delay.name),
        vars::otel_bsp_schedule_delay.name,
        "a whole number of milliseconds",
        |t| t.trim().parse::<u64>().ok().map(Duration::from_millis),
        DEFAULT_EXPORT_INTERVAL,
    )?;
    Ok(Some(TracingSettings {
        protocol,
        endpoint: endpoint(args, get, protocol)?,
        headers: headers(get)?,
        service_name: text(&args.tracing_service_name, vars::tracing_service_name.name)
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned()),
        service_namespace: text(
            &args.tracing_service_namespace,
            vars::tracing_service_namespace.name,
        )
        .unwrap_or_default(),
        service_instance_id: text(
            &args.tracing_service_instance_id,
            vars::tracing_service_instance_id.name,
        ),
        sampling_rate,
        export_interval,
    }))
}

/// The traces endpoint: `otel_exporter_otlp_traces_endpoint` as it is, else
/// `--otlp-endpoint` or `otel_exporter_otlp_endpoint` (plus `/v1/traces` for
/// HTTP), else the protocol's default. Only plaintext `http://` is built;
/// an endpoint without a scheme is plaintext when `…_INSECURE` is true.
fn endpoint<'a>(
    args: &ServeArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    protocol: ExportProtocol,
) -> Result<String, SettingsError> {
    let signal = vars::otel_exporter_otlp_traces_endpoint.name;
    let generic = vars::otel_exporter_otlp_endpoint.name;
    let (var, text, is_base) = if let Some(url) = get(signal) {
        (signal, url.to_owned(), false)
    } else if let Some(url) = &args.otlp_endpoint {
        (generic, url.clone(), true)
    } else if let Some(url) = get(generic) {
        (generic, url.to_owned(), true)
    } else {
        let url = match protocol {
            ExportProtocol::Http => DEFAULT_HTTP_ENDPOINT,
            ExportProtocol::Grpc => DEFAULT_GRPC_ENDPOINT,
        };
        (generic, url.to_owned(), true)
    };
    let text = text.trim();
    let insecure = boolean(
        None,
        get(vars::otel_exporter_otlp_traces_insecure.name)
            .or_else(|| get(vars::otel_exporter_otlp_insecure.name)),
        vars::otel_exporter_otlp_insecure.name,
    )?;
    let url = if text.starts_with("http://") {
        text.to_owned()
    } else if !text.contains("://") && insecure {
        format!("http://{text}")
    } else {
        return Err(SettingsError::InvalidEnv {
            var,
            value: text.to_owned(),
            expected: "an http:// URL (TLS to the collector is not built)",
        });
    };
    let authority = url.trim_start_matches("http://");
    if authority.is_empty() || authority.starts_with('/') {
        return Err(SettingsError::InvalidEnv {
            var,
            value: text.to_owned(),
            expected: "an http:// URL with a host",
        });
    }
    Ok(match (protocol, is_base) {
        (ExportProtocol::Http, true) => format!("{}/v1/traces", url.trim_end_matches('/')),
        _ => url,
    })
}

/// `otel_exporter_otlp_headers` then `otel_exporter_otlp_traces_headers`
/// (which wins for a name in both): `name=value` pairs, comma-separated,
/// values percent-decoded.
fn headers<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Vec<(String, String)>, SettingsError> {
    let mut headers: Vec<(String, String)> = Vec::new();
    for var in [
        vars::otel_exporter_otlp_headers.name,
        vars::otel_exporter_otlp_traces_headers.name,
    ] {
        let Some(text) = get(var) else { continue };
        let invalid = || SettingsError::InvalidEnv {
            var,
            value: text.to_owned(),
            expected: "name=value pairs separated by commas",
        };
        for pair in text.split(',').filter(|p| !p.trim().is_empty()) {
            let (name, value) = pair.split_once('=').ok_or_else(invalid)?;
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() {
                return Err(invalid());
            }
            let value = percent_decode(value.trim()).ok_or_else(invalid)?;
            headers.retain(|(n, _)| *n != name);
            headers.push((name, value));
        }
    }
    Ok(headers)
}

/// Decodes `%XX` escapes (the OTLP header format's); `None` when malformed
/// or not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.bytes();
    while let Some(b) = rest.next() {
        if b == b'%' {
            let hex = [rest.next()?, rest.next()?];
            let hex = std::str::from_utf8(&hex).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
        } else {
            bytes.push(b);
        }
    }
    String::from_utf8(bytes).ok()
}
