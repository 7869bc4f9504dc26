//! Settings tests: tracing (TRACING_*, OTEL_EXPORTER_OTLP_*).

use super::*;

#[test]
fn tracing_is_off_unless_enabled_and_has_the_reference_defaults() {
    assert!(resolve(&[], &[]).unwrap().tracing.is_none());
    let t = resolve(&[], &[(vars::tracing_enabled.name, "true")])
        .unwrap()
        .tracing
        .unwrap();
    assert_eq!(t.protocol, crate::otel::ExportProtocol::Http);
    assert_eq!(t.endpoint, "http://localhost:4318/v1/traces");
    assert_eq!(t.service_name, "RateLimit");
    assert_eq!(t.service_namespace, "");
    assert_eq!(t.service_instance_id, None);
    assert!((t.sampling_rate - 1.0).abs() < f64::EPSILON);
    assert_eq!(t.export_interval, Duration::from_secs(5));
    assert!(t.headers.is_empty());
    let grpc = resolve(
        &["--tracing-enabled", "--tracing-exporter-protocol", "grpc"],
        &[],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(grpc.endpoint, "http://localhost:4317");
}

#[test]
fn tracing_reads_envoy_gateways_variables() {
    let t = resolve(
        &[],
        &[
            (vars::tracing_enabled.name, "true"),
            (vars::tracing_service_name.name, "ratelimit"),
            (vars::tracing_service_namespace.name, "envoy-gateway-system"),
            (vars::tracing_service_instance_id.name, "pod-7"),
            (vars::tracing_sampling_rate.name, "0.25"),
            (
                vars::otel_exporter_otlp_endpoint.name,
                "http://otel-collector.monitoring:4318/",
            ),
            (vars::otel_bsp_schedule_delay.name, "250"),
        ],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(
        t.endpoint,
        "http://otel-collector.monitoring:4318/v1/traces"
    );
    assert_eq!(t.service_name, "ratelimit");
    assert_eq!(t.service_namespace, "envoy-gateway-system");
    assert_eq!(t.service_instance_id.as_deref(), Some("pod-7"));
    assert!((t.sampling_rate - 0.25).abs() < f64::EPSILON);
    assert_eq!(t.export_interval, Duration::from_millis(250));

    let grpc = resolve(
        &[],
        &[
            (vars::tracing_enabled.name, "1"),
            (vars::tracing_exporter_protocol.name, "GRPC"),
            (
                vars::otel_exporter_otlp_endpoint.name,
                "http://collector:4317",
            ),
        ],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(grpc.protocol, crate::otel::ExportProtocol::Grpc);
    assert_eq!(grpc.endpoint, "http://collector:4317");
}

#[test]
fn tracing_endpoint_follows_the_otlp_precedence() {
    let endpoint = |args: &[&str], vars: &[(&str, &str)]| {
        let mut all = vec![(vars::tracing_enabled.name, "true")];
        all.extend_from_slice(vars);
        resolve(args, &all).map(|s| s.tracing.unwrap().endpoint)
    };
    // The signal-specific variable is used as it is, and wins.
    assert_eq!(
        endpoint(
            &["--otlp-endpoint", "http://flag:4318"],
            &[
                (
                    vars::otel_exporter_otlp_traces_endpoint.name,
                    "http://traces:9/custom"
                ),
                (
                    vars::otel_exporter_otlp_endpoint.name,
                    "http://generic:4318"
                ),
            ]
        )
        .unwrap(),
        "http://traces:9/custom"
    );
    assert_eq!(
        endpoint(
            &["--otlp-endpoint", "http://flag:4318"],
            &[(
                vars::otel_exporter_otlp_endpoint.name,
                "http://generic:4318"
            )]
        )
        .unwrap(),
        "http://flag:4318/v1/traces"
    );
    // No scheme: plaintext only when insecure is asked.
    assert_eq!(
        endpoint(
            &[],
            &[
                (vars::otel_exporter_otlp_endpoint.name, "collector:4318"),
                (vars::otel_exporter_otlp_insecure.name, "true"),
            ]
        )
        .unwrap(),
        "http://collector:4318/v1/traces"
    );
    for (var, bad) in [
        (vars::otel_exporter_otlp_endpoint.name, "collector:4318"),
        (
            vars::otel_exporter_otlp_endpoint.name,
            "https://collector:4318",
        ),
        (
            vars::otel_exporter_otlp_traces_endpoint.name,
            "https://collector/v1/traces",
        ),
        (vars::otel_exporter_otlp_endpoint.name, "http://"),
    ] {
        let err = endpoint(&[], &[(var, bad)]).unwrap_err();
        assert!(err.to_string().contains(var), "{err}");
        assert!(err.to_string().contains("http://"), "{err}");
    }
}

#[test]
fn tracing_headers_merge_and_decode() {
    let t = resolve(
        &[],
        &[
            (vars::tracing_enabled.name, "true"),
            (
                vars::otel_exporter_otlp_headers.name,
                "Authorization=Basic%20abc, x-a=1",
            ),
            (
                vars::otel_exporter_otlp_traces_headers.name,
                "x-a=2,x-b=%3D",
            ),
        ],
    )
    .unwrap()
    .tracing
    .unwrap();
    assert_eq!(
        t.headers,
        vec![
            ("authorization".to_owned(), "Basic abc".to_owned()),
            ("x-a".to_owned(), "2".to_owned()),
            ("x-b".to_owned(), "=".to_owned()),
        ]
    );
    for bad in ["novalue", "=v", "x=%zz"] {
        let err = resolve(
            &[],
            &[
                (vars::tracing_enabled.name, "true"),
                (vars::otel_exporter_otlp_headers.name, bad),
            ],
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains(vars::otel_exporter_otlp_headers.name),
            "{err}"
        );
    }
}

#[test]
fn tracing_rejects_bad_values_by_name() {
    for (var, bad) in [
        (vars::tracing_exporter_protocol.name, "udp"),
        (vars::tracing_sampling_rate.name, "half"),
        (vars::tracing_sampling_rate.name, "NaN"),
        (vars::otel_bsp_schedule_delay.name, "5s"),
    ] {
        let err = resolve(&[], &[(vars::tracing_enabled.name, "true"), (var, bad)]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("environment variable {var}='{bad}'")),
            "{err}"
        );
    }
    // Tracing off: its variables are not read.
    assert!(resolve(&[], &[(vars::tracing_sampling_rate.name, "half")]).is_ok());
}
