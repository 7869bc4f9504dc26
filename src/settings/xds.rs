//! Where rules come from: the rule directory (`CONFIG_TYPE=FILE`) or an
//! xDS management server (`CONFIG_TYPE=GRPC_XDS_SOTW`), with the
//! reference's `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` settings.

use super::*;
use crate::config::xds::{Backoff, XdsOptions, XdsTls};

/// Where rules come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum ConfigType {
    /// The rule directory, polled for changes.
    #[default]
    File,
    /// An xDS management server (ADS, state of the world).
    #[value(alias = "grpc_xds_sotw")]
    GrpcXdsSotw,
}

/// Flags of the rule source; each falls back to its environment variable.
#[derive(Debug, Clone, Default, Args)]
pub struct XdsArgs {
    /// Where rules come from: file or grpc-xds-sotw [env: CONFIG_TYPE (FILE or GRPC_XDS_SOTW)] [default: file]
    #[arg(long, value_enum)]
    pub config_type: Option<ConfigType>,
    /// With xDS, serve before the first rules arrive (every domain unknown until then) [env: FORCE_START_WITHOUT_INITIAL_CONFIG]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub force_start_without_initial_config: Option<bool>,
    /// host:port of the xDS (ADS) server [env: CONFIG_GRPC_XDS_SERVER_URL] [default: localhost:18000]
    #[arg(long, value_name = "HOST:PORT")]
    pub config_grpc_xds_server_url: Option<String>,
    /// xDS node id [env: CONFIG_GRPC_XDS_NODE_ID] [default: default]
    #[arg(long, value_name = "ID")]
    pub config_grpc_xds_node_id: Option<String>,
    /// xDS node metadata, `k1=v1,k2=v2` [env: CONFIG_GRPC_XDS_NODE_METADATA]
    #[arg(long, value_name = "PAIRS")]
    pub config_grpc_xds_node_metadata: Option<String>,
    /// gRPC metadata sent to the xDS server, `k1:v1,k2:v2` [env: CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS]
    #[arg(long, value_name = "PAIRS")]
    pub config_grpc_xds_client_additional_headers: Option<String>,
    /// Connect to the xDS server over TLS [env: CONFIG_GRPC_XDS_SERVER_USE_TLS]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub config_grpc_xds_server_use_tls: Option<bool>,
    /// PEM client certificate for mTLS to the xDS server [env: CONFIG_GRPC_XDS_CLIENT_TLS_CERT]
    #[arg(long, value_name = "FILE")]
    pub config_grpc_xds_client_tls_cert: Option<PathBuf>,
    /// PEM key of the xDS client certificate [env: CONFIG_GRPC_XDS_CLIENT_TLS_KEY]
    #[arg(long, value_name = "FILE")]
    pub config_grpc_xds_client_tls_key: Option<PathBuf>,
    /// PEM CA bundle the xDS server's certificate must chain to [env: CONFIG_GRPC_XDS_SERVER_TLS_CACERT] [default: the system's roots]
    #[arg(long, value_name = "FILE")]
    pub config_grpc_xds_server_tls_cacert: Option<PathBuf>,
    /// Name the xDS server's certificate must be valid for [env: CONFIG_GRPC_XDS_SERVER_TLS_SAN] [default: the server's host]
    #[arg(long, value_name = "NAME")]
    pub config_grpc_xds_server_tls_san: Option<String>,
    /// Wait between failed connection attempts, ± 50 % [env: CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL] [default: 3s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub config_grpc_xds_server_connect_retry_interval: Option<Duration>,
    /// First wait before reopening a broken xDS stream [env: XDS_CLIENT_BACKOFF_INITIAL_INTERVAL] [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub xds_client_backoff_initial_interval: Option<Duration>,
    /// Longest wait before reopening a broken xDS stream [env: XDS_CLIENT_BACKOFF_MAX_INTERVAL] [default: 60s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub xds_client_backoff_max_interval: Option<Duration>,
    /// Spread of a reopen wait, ± this share of it [env: XDS_CLIENT_BACKOFF_RANDOM_FACTOR] [default: 0.5]
    #[arg(long, value_name = "RATIO")]
    pub xds_client_backoff_random_factor: Option<f64>,
    /// Spread reopen waits at random [env: XDS_CLIENT_BACKOFF_JITTER] [default: true]
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub xds_client_backoff_jitter: Option<bool>,
    /// Largest xDS response accepted [env: XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES] [default: 4194304]
    #[arg(long, value_name = "BYTES")]
    pub xds_client_max_msg_size_in_bytes: Option<usize>,
}

/// The xDS client's options when `CONFIG_TYPE` is `GRPC_XDS_SOTW`, `None`
/// for rule files.
pub(super) fn xds_options<'a>(
    args: &XdsArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<XdsOptions>, SettingsError> {
    let config_type = choice(
        args.config_type,
        get("CONFIG_TYPE"),
        "CONFIG_TYPE",
        "FILE or GRPC_XDS_SOTW",
        ConfigType::File,
    )?;
    if config_type == ConfigType::File {
        return Ok(None);
    }
    let text =
        |arg: &Option<String>, var: &str| arg.clone().or_else(|| get(var).map(str::to_owned));
    let path =
        |arg: &Option<PathBuf>, var: &str| arg.clone().or_else(|| get(var).map(PathBuf::from));
    let defaults = XdsOptions::default();
    let tls = if boolean(
        args.config_grpc_xds_server_use_tls,
        get("CONFIG_GRPC_XDS_SERVER_USE_TLS"),
        "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    )? {
        let tls = XdsTls {
            ca_cert: path(
                &args.config_grpc_xds_server_tls_cacert,
                "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
            ),
            client_cert: path(
                &args.config_grpc_xds_client_tls_cert,
                "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
            ),
            client_key: path(
                &args.config_grpc_xds_client_tls_key,
                "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
            ),
            san: text(
                &args.config_grpc_xds_server_tls_san,
                "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
            ),
        };
        if tls.client_cert.is_some() != tls.client_key.is_some() {
            return Err(SettingsError::Missing {
                setting: "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
                needs: "CONFIG_GRPC_XDS_CLIENT_TLS_KEY (the two go together)",
            });
        }
        Some(tls)
    } else {
        // As the reference: without CONFIG_GRPC_XDS_SERVER_USE_TLS the
        // other TLS settings are ignored.
        None
    };
    let headers = text(
        &args.config_grpc_xds_client_additional_headers,
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    );
    let additional_headers = match headers {
        None => Vec::new(),
        Some(text) => header_pairs(&text).ok_or(SettingsError::InvalidEnv {
            var: "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            value: text,
            expected: "a list such as k1:v1,k2:v2",
        })?,
    };
    let backoff_defaults = Backoff::default();
    let backoff = Backoff {
        initial: duration(
            args.xds_client_backoff_initial_interval,
            get("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL"),
            "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
            backoff_defaults.initial,
        )?,
        max: duration(
            args.xds_client_backoff_max_interval,
            get("XDS_CLIENT_BACKOFF_MAX_INTERVAL"),
            "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
            backoff_defaults.max,
        )?,
        random_factor: pick(
            args.xds_client_backoff_random_factor,
            get("XDS_CLIENT_BACKOFF_RANDOM_FACTOR"),
            "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
            "a ratio between 0 and 1",
            |t| t.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)),
            backoff_defaults.random_factor,
        )?,
        jitter: match (
            args.xds_client_backoff_jitter,
            get("XDS_CLIENT_BACKOFF_JITTER"),
        ) {
            (None, None) => backoff_defaults.jitter,
            (flag, env) => boolean(flag, env, "XDS_CLIENT_BACKOFF_JITTER")?,
        },
    };
    Ok(Some(XdsOptions {
        server_url: text(
            &args.config_grpc_xds_server_url,
            "CONFIG_GRPC_XDS_SERVER_URL",
        )
        .unwrap_or(defaults.server_url),
        node_id: text(&args.config_grpc_xds_node_id, "CONFIG_GRPC_XDS_NODE_ID")
            .unwrap_or(defaults.node_id),
        node_metadata: text(
            &args.config_grpc_xds_node_metadata,
            "CONFIG_GRPC_XDS_NODE_METADATA",
        )
        .map(|text| metadata_pairs(&text))
        .unwrap_or_default(),
        additional_headers,
        tls,
        max_message_bytes: number(
            args.xds_client_max_msg_size_in_bytes,
            get("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES"),
            "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
            defaults.max_message_bytes,
        )?,
        backoff,
        connect_retry_interval: duration(
            args.config_grpc_xds_server_connect_retry_interval,
            get("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL"),
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            defaults.connect_retry_interval,
        )?,
    }))
}

/// `k1=v1,k2=v2`, read as the reference reads node metadata: an entry
/// without `=` is skipped, the value is everything after the first `=`.
fn metadata_pairs(text: &str) -> Vec<(String, String)> {
    text.split(',')
        .filter_map(|entry| entry.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

/// `k1:v1,k2:v2`; `None` when an entry has no `:` or an empty name.
fn header_pairs(text: &str) -> Option<Vec<(String, String)>> {
    text.split(',')
        .map(|entry| {
            let (key, value) = entry.split_once(':')?;
            let key = key.trim();
            (!key.is_empty()).then(|| (key.to_owned(), value.trim().to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn resolve(args: &[&str], vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
        let cli =
            Cli::try_parse_from(std::iter::once("floodgate").chain(args.iter().copied())).unwrap();
        let env = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Settings::resolve(&cli.serve, &env)
    }

    #[test]
    fn rule_files_unless_config_type_says_xds() {
        let s = resolve(&[], &[]).unwrap();
        assert_eq!(s.xds, None);
        assert!(!s.force_start_without_initial_config);
        let s = resolve(&[], &[("CONFIG_TYPE", "FILE")]).unwrap();
        assert_eq!(s.xds, None);
        let s = resolve(&[], &[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).unwrap();
        assert_eq!(s.xds, Some(XdsOptions::default()));
        let s = resolve(
            &["--config-type", "grpc-xds-sotw"],
            &[("CONFIG_TYPE", "FILE")],
        )
        .unwrap();
        assert!(s.xds.is_some());
        let err = resolve(&[], &[("CONFIG_TYPE", "GRPC_XDS_DELTA")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "environment variable CONFIG_TYPE='GRPC_XDS_DELTA' is not FILE or GRPC_XDS_SOTW"
        );
    }

    #[test]
    fn envoy_gateway_environment_reads_with_the_reference_meaning() {
        let s = resolve(
            &[],
            &[
                ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
                ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
                ("CONFIG_GRPC_XDS_SERVER_URL", "envoy-gateway:18001"),
                ("CONFIG_GRPC_XDS_NODE_ID", "envoy-ratelimit"),
                ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a"),
                ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant:blue"),
                ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt"),
                ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/certs/tls.key"),
                ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/certs/ca.crt"),
                ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "envoy-gateway"),
                ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "1s"),
                ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "2s"),
                ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "30s"),
                ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.2"),
                ("XDS_CLIENT_BACKOFF_JITTER", "false"),
                ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1024"),
            ],
        )
        .unwrap();
        assert!(s.force_start_without_initial_config);
        let expected = XdsOptions {
            server_url: "envoy-gateway:18001".to_owned(),
            node_id: "envoy-ratelimit".to_owned(),
            node_metadata: vec![("zone".to_owned(), "a".to_owned())],
            additional_headers: vec![("x-tenant".to_owned(), "blue".to_owned())],
            tls: Some(XdsTls {
                ca_cert: Some(PathBuf::from("/certs/ca.crt")),
                client_cert: Some(PathBuf::from("/certs/tls.crt")),
                client_key: Some(PathBuf::from("/certs/tls.key")),
                san: Some("envoy-gateway".to_owned()),
            }),
            max_message_bytes: 1024,
            backoff: Backoff {
                initial: Duration::from_secs(2),
                max: Duration::from_secs(30),
                random_factor: 0.2,
                jitter: false,
            },
            connect_retry_interval: Duration::from_secs(1),
        };
        assert_eq!(s.xds, Some(expected));
    }

    #[test]
    fn tls_files_are_ignored_without_use_tls_and_must_pair_with_it() {
        let s = resolve(
            &["--config-type=grpc-xds-sotw"],
            &[("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt")],
        )
        .unwrap();
        assert_eq!(s.xds.unwrap().tls, None);
        let err = resolve(
            &[
                "--config-type=grpc-xds-sotw",
                "--config-grpc-xds-server-use-tls",
            ],
            &[("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/certs/tls.crt")],
        )
        .unwrap_err();
        assert!(matches!(err, SettingsError::Missing { .. }), "{err}");
    }

    #[test]
    fn malformed_xds_values_name_their_variable() {
        for (var, value) in [
            ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "x-tenant"),
            ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "soon"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "big"),
        ] {
            let err = resolve(&[], &[("CONFIG_TYPE", "GRPC_XDS_SOTW"), (var, value)]).unwrap_err();
            assert!(
                matches!(&err, SettingsError::InvalidEnv { var: v, .. } if *v == var),
                "{err}"
            );
        }
    }

    #[test]
    fn pairs_parse_as_the_reference_reads_them() {
        assert_eq!(
            metadata_pairs("zone=a,bogus,url=x=y"),
            [
                ("zone".to_owned(), "a".to_owned()),
                ("url".to_owned(), "x=y".to_owned())
            ]
        );
        assert_eq!(
            header_pairs("x-tenant:blue, authorization:Bearer t:1"),
            Some(vec![
                ("x-tenant".to_owned(), "blue".to_owned()),
                ("authorization".to_owned(), "Bearer t:1".to_owned())
            ])
        );
        assert_eq!(header_pairs("x-tenant"), None);
    }
}
