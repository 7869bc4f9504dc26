//! Redis settings: the main Redis and the per-second one, each from its
//! flags and `REDIS_*` / `REDIS_PERSECOND_*` variables.

use super::*;

/// Resolved Redis settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// The main Redis.
    pub main: RedisConfig,
    /// The per-second Redis, with `REDIS_PERSECOND`.
    pub per_second: Option<RedisConfig>,
}

/// Resolves one Redis: `prefix` is `REDIS_` or `REDIS_PERSECOND_`; flags
/// apply to the main Redis only (and `--redis-persecond-url`).
pub(super) fn redis_config<'a>(
    args: &StoreArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    prefix: &'static str,
) -> Result<RedisConfig, SettingsError> {
    let main = prefix == "REDIS_";
    let var = |name: &str| get(&format!("{prefix}{name}"));
    let url = if main {
        args.redis_url.clone()
    } else {
        args.redis_persecond_url.clone()
    }
    .or_else(|| var("URL").map(str::to_owned))
    .unwrap_or_else(|| "127.0.0.1:6379".to_owned());
    // Variable names must be 'static for error messages: pick the pair.
    let name = |main_name: &'static str, second_name: &'static str| {
        if main { main_name } else { second_name }
    };
    let flag_of = |flag: Option<Duration>| flag.filter(|_| main);
    let mode = choice(
        if main { args.redis_type } else { None },
        var("TYPE"),
        name("REDIS_TYPE", "REDIS_PERSECOND_TYPE"),
        "single, sentinel or cluster",
        RedisType::Single,
    )?;
    let tls_on = boolean(
        args.redis_tls.filter(|_| main),
        var("TLS"),
        name("REDIS_TLS", "REDIS_PERSECOND_TLS"),
    )?;
    let path =
        |flag: &Option<PathBuf>, var: &str| flag.clone().or_else(|| get(var).map(PathBuf::from));
    let tls = if tls_on {
        let skip = boolean(
            args.redis_tls_skip_hostname_verification,
            get("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"),
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
        )?;
        Some(RedisTls {
            ca_cert: path(&args.redis_tls_cacert, "REDIS_TLS_CACERT"),
            client_cert: path(&args.redis_tls_client_cert, "REDIS_TLS_CLIENT_CERT"),
            client_key: path(&args.redis_tls_client_key, "REDIS_TLS_CLIENT_KEY"),
            skip_hostname_verification: skip,
        })
    } else {
        None
    };
    Ok(RedisConfig {
        tls,
        mode: match mode {
            RedisType::Single => RedisMode::Single,
            RedisType::Sentinel => RedisMode::Sentinel,
            RedisType::Cluster => RedisMode::Cluster,
        },
        url,
        auth: if main { args.redis_auth.clone() } else { None }
            .or_else(|| var("AUTH").map(str::to_owned)),
        sentinel_auth: if main {
            args.redis_sentinel_auth.clone()
        } else {
            None
        }
        .or_else(|| var("SENTINEL_AUTH").map(str::to_owned)),
        pool_size: number(
            if main { args.redis_pool_size } else { None },
            var("POOL_SIZE"),
            name("REDIS_POOL_SIZE", "REDIS_PERSECOND_POOL_SIZE"),
            2,
        )?
        .max(1),
        timeout: duration(
            flag_of(args.redis_timeout),
            var("TIMEOUT"),
            name("REDIS_TIMEOUT", "REDIS_PERSECOND_TIMEOUT"),
            Duration::from_millis(100),
        )?,
        connect_timeout: duration(
            flag_of(args.redis_connect_timeout),
            var("CONNECT_TIMEOUT"),
            name("REDIS_CONNECT_TIMEOUT", "REDIS_PERSECOND_CONNECT_TIMEOUT"),
            Duration::from_secs(1),
        )?,
        key_prefix: args
            .cache_key_prefix
            .clone()
            .or_else(|| get("CACHE_KEY_PREFIX").map(str::to_owned))
            .unwrap_or_default(),
        expiration_jitter_max_secs: number(
            args.expiration_jitter_max_seconds,
            get("EXPIRATION_JITTER_MAX_SECONDS"),
            "EXPIRATION_JITTER_MAX_SECONDS",
            300,
        )?,
        // One setting for both Redis stores, as in the reference.
        redial_on_readonly: match (
            args.redis_close_connection_on_readonly_error,
            get("REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR"),
        ) {
            (None, None) => true,
            (flag, env) => boolean(flag, env, "REDIS_CLOSE_CONNECTION_ON_READONLY_ERROR")?,
        },
    })
}
