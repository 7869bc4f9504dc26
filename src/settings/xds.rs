//! Where rules come from: the rule directory (`config_type=FILE`) or an
//! xDS management server (`config_type=GRPC_XDS_SOTW`), with the
//! reference's `CONFIG_GRPC_XDS_*` and `XDS_CLIENT_*` settings.

use super::*;
use crate::config::xds::{Backoff, XdsOptions, XdsTls};

/// Where rules come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(crate) enum ConfigType {
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
    #[arg(long, value_enum, help = vars::config_type.help())]
    pub(crate) config_type: Option<ConfigType>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::force_start_without_initial_config.help())]
    pub(crate) force_start_without_initial_config: Option<bool>,
    #[arg(long, value_name = "ADDR", help = vars::config_grpc_xds_server_url.help())]
    pub(crate) config_grpc_xds_server_url: Option<String>,
    #[arg(long, value_name = "ID", help = vars::config_grpc_xds_node_id.help())]
    pub(crate) config_grpc_xds_node_id: Option<String>,
    #[arg(long, value_name = "PAIRS", help = vars::config_grpc_xds_node_metadata.help())]
    pub(crate) config_grpc_xds_node_metadata: Option<String>,
    #[arg(long, value_name = "PAIRS", help = vars::config_grpc_xds_client_additional_headers.help())]
    pub(crate) config_grpc_xds_client_additional_headers: Option<String>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::config_grpc_xds_server_use_tls.help())]
    pub(crate) config_grpc_xds_server_use_tls: Option<bool>,
    #[arg(long, value_name = "FILE", help = vars::config_grpc_xds_client_tls_cert.help())]
    pub(crate) config_grpc_xds_client_tls_cert: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = vars::config_grpc_xds_client_tls_key.help())]
    pub(crate) config_grpc_xds_client_tls_key: Option<PathBuf>,
    #[arg(long, value_name = "FILE", help = vars::config_grpc_xds_server_tls_cacert.help())]
    pub(crate) config_grpc_xds_server_tls_cacert: Option<PathBuf>,
    #[arg(long, value_name = "NAME", help = vars::config_grpc_xds_server_tls_san.help())]
    pub(crate) config_grpc_xds_server_tls_san: Option<String>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::config_grpc_xds_server_connect_retry_interval.help())]
    pub(crate) config_grpc_xds_server_connect_retry_interval: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::xds_client_backoff_initial_interval.help())]
    pub(crate) xds_client_backoff_initial_interval: Option<Duration>,
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help = vars::xds_client_backoff_max_interval.help())]
    pub(crate) xds_client_backoff_max_interval: Option<Duration>,
    #[arg(long, value_name = "RATIO", help = vars::xds_client_backoff_random_factor.help())]
    pub(crate) xds_client_backoff_random_factor: Option<f64>,
    #[arg(long, value_name = "BOOL", num_args = 0..=1, default_missing_value = "true", help = vars::xds_client_backoff_jitter.help())]
    pub(crate) xds_client_backoff_jitter: Option<bool>,
    #[arg(long, value_name = "BYTES", help = vars::xds_client_max_msg_size_in_bytes.help())]
    pub(crate) xds_client_max_msg_size_in_bytes: Option<usize>,
}

/// The xDS client's options when `config_type` is `GRPC_XDS_SOTW`, `None`
/// for rule files.
pub(super) fn xds_options<'a>(
    args: &XdsArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<XdsOptions>, SettingsError> {
    let config_type = choice(
        args.config_type,
        get(vars::config_type.name),
        vars::config_type.name,
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
        get(vars::config_grpc_xds_server_use_tls.name),
        vars::config_grpc_xds_server_use_tls.name,
    )? {
        let tls = XdsTls {
            ca_cert: path(
                &args.config_grpc_xds_server_tls_cacert,
                vars::config_grpc_xds_server_tls_cacert.name,
            ),
            client_cert: path(
                &args.config_grpc_xds_client_tls_cert,
                vars::config_grpc_xds_client_tls_cert.name,
            ),
            client_key: path(
                &args.config_grpc_xds_client_tls_key,
                vars::config_grpc_xds_client_tls_key.name,
            ),
            san: text(
                &args.config_grpc_xds_server_tls_san,
                vars::config_grpc_xds_server_tls_san.name,
            ),
        };
        if tls.client_cert.is_some() != tls.client_key.is_some() {
            return Err(SettingsError::Missing {
                setting: vars::config_grpc_xds_client_tls_cert.name,
                needs: format!(
                    "{} (the two go together)",
                    vars::config_grpc_xds_client_tls_key.name
                ),
            });
        }
        Some(tls)
    } else {
        // As the reference: without config_grpc_xds_server_use_tls the
        // other TLS settings are ignored.
        None
    };
    let headers = text(
        &args.config_grpc_xds_client_additional_headers,
        vars::config_grpc_xds_client_additional_headers.name,
    );
    let additional_headers = match headers {
        None => Vec::new(),
        Some(text) => header_pairs(&text).ok_or(SettingsError::InvalidEnv {
            var: vars::config_grpc_xds_client_additional_headers.name,
            value: text,
            expected: "a list such as k1:v1,k2:v2",
        })?,
    };
    let backoff_defaults = Backoff::default();
    let backoff = Backoff {
        initial: duration(
            args.xds_client_backoff_initial_interval,
            get(vars::xds_client_backoff_initial_interval.name),
            vars::xds_client_backoff_initial_interval.name,
            backoff_defaults.initial,
        )?,
        max: duration(
            args.xds_client_backoff_max_interval,
            get(vars::xds_client_backoff_max_interval.name),
            vars::xds_client_backoff_max_interval.name,
            backoff_defaults.max,
        )?,
        random_factor: pick(
            args.xds_client_backoff_random_factor,
            get(vars::xds_client_backoff_random_factor.name),
            vars::xds_client_backoff_random_factor.name,
            "a ratio between 0 and 1",
            |t| t.parse::<f64>().ok().filter(|r| (0.0..=1.0).contains(r)),
            backoff_defaults.random_factor,
        )?,
        jitter: match (
            args.xds_client_backoff_jitter,
            get(vars::xds_client_backoff_jitter.name),
        ) {
            (None, None) => backoff_defaults.jitter,
            (flag, env) => boolean(flag, env, vars::xds_client_backoff_jitter.name)?,
        },
    };
    Ok(Some(XdsOptions {
        server_url: text(
            &args.config_grpc_xds_server_url,
            vars::config_grpc_xds_server_url.name,
        )
        .unwrap_or(defaults.server_url),
        node_id: text(
            &args.config_grpc_xds_node_id,
            vars::config_grpc_xds_node_id.name,
        )
        .unwrap_or(defaults.node_id),
        node_metadata: text(
            &args.config_grpc_xds_node_metadata,
            vars::config_grpc_xds_node_metadata.name,
        )
        .map(|text| metadata_pairs(&text))
        .unwrap_or_default(),
        additional_headers,
        tls,
        max_message_bytes: number(
            args.xds_client_max_msg_size_in_bytes,
            get(vars::xds_client_max_msg_size_in_bytes.name),
            vars::xds_client_max_msg_size_in_bytes.name,
            defaults.max_message_bytes,
        )?,
        backoff,
        connect_retry_interval: duration(
            args.config_grpc_xds_server_connect_retry_interval,
            get(vars::config_grpc_xds_server_connect_retry_interval.name),
            vars::config_grpc_xds_server_connect_retry_interval.name,
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
        let s = resolve(&[], &[(vars::config_type.name, "FILE")]).unwrap();
        assert_eq!(s.xds, None);
        let s = resolve(&[], &[(vars::config_type.name, "GRPC_XDS_SOTW")]).unwrap();
        assert_eq!(s.xds, Some(XdsOptions::default()));
        let s = resolve(
            &["--config-type", "grpc-xds-sotw"],
            &[(vars::config_type.name, "FILE")],
        )
        .unwrap();
        assert!(s.xds.is_some());
        let err = resolve(&[], &[(vars::config_type.name, "GRPC_XDS_DELTA")]).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "environment variable {}='GRPC_XDS_DELTA' is not FILE or GRPC_XDS_SOTW",
                vars::config_type.name
            )
        );
    }

    #[test]
    fn envoy_gateway_environment_reads_with_the_reference_meaning() {
        let s = resolve(
            &[],
            &[
                (vars::config_type.name, "GRPC_XDS_SOTW"),
                (vars::force_start_without_initial_config.name, "true"),
                (vars::config_grpc_xds_server_url.name, "envoy-gateway:18001"),
                (vars::config_grpc_xds_node_id.name, "envoy-ratelimit"),
                (vars::config_grpc_xds_node_metadata.name, "zone=a"),
                (
                    vars::config_grpc_xds_client_additional_headers.name,
                    "x-tenant:blue",
                ),
                (vars::config_grpc_xds_server_use_tls.name, "true"),
                (vars::config_grpc_xds_client_tls_cert.name, "/certs/tls.crt"),
                (vars::config_grpc_xds_client_tls_key.name, "/certs/tls.key"),
                (
                    vars::config_grpc_xds_server_tls_cacert.name,
                    "/certs/ca.crt",
                ),
                (vars::config_grpc_xds_server_tls_san.name, "envoy-gateway"),
                (
                    vars::config_grpc_xds_server_connect_retry_interval.name,
                    "1s",
                ),
                (vars::xds_client_backoff_initial_interval.name, "2s"),
                (vars::xds_client_backoff_max_interval.name, "30s"),
                (vars::xds_client_backoff_random_factor.name, "0.2"),
                (vars::xds_client_backoff_jitter.name, "false"),
                (vars::xds_client_max_msg_size_in_bytes.name, "1024"),
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
            &[(vars::config_grpc_xds_client_tls_cert.name, "/certs/tls.crt")],
        )
        .unwrap();
        assert_eq!(s.xds.unwrap().tls, None);
        let err = resolve(
            &[
                "--config-type=grpc-xds-sotw",
                "--config-grpc-xds-server-use-tls",
            ],
            &[(vars::config_grpc_xds_client_tls_cert.name, "/certs/tls.crt")],
        )
        .unwrap_err();
        assert!(matches!(err, SettingsError::Missing { .. }), "{err}");
    }

    #[test]
    fn malformed_xds_values_name_their_variable() {
        for (var, value) in [
            (
                vars::config_grpc_xds_client_additional_headers.name,
                "x-tenant",
            ),
            (vars::xds_client_backoff_random_factor.name, "2"),
            (vars::xds_client_backoff_initial_interval.name, "soon"),
            (vars::xds_client_max_msg_size_in_bytes.name, "big"),
        ] {
            let err = resolve(
                &[],
                &[(vars::config_type.name, "GRPC_XDS_SOTW"), (var, value)],
            )
            .unwrap_err();
            assert!(
                matches!(&err, SettingsError::InvalidEnv { var: v, .. }
                    | SettingsError::InvalidDuration { var: v, .. } if *v == var),
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
