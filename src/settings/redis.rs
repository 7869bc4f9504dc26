//! Redis settings: the main Redis and the per-second one, each from its
//! flags and `REDIS_*` / `REDIS_PERSECOND_*` variables.

use super::vars::{self, Var};
use super::*;

/// Resolved Redis settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// The main Redis.
    pub main: RedisConfig,
    /// The per-second Redis, with `redis_persecond`.
    pub per_second: Option<RedisConfig>,
    /// `redis_startup_max_elapsed_time`: give up (stop the process) when
    /// Redis is still not connected this long after start; `None`: never.
    pub startup_max_elapsed: Option<Duration>,
}

/// The variables of one Redis: the main one or the per-second one.
#[derive(Debug)]
pub(super) struct RedisVars {
    main: bool,
    url: Var,
    kind: Var,
    tls: Var,
    auth: Var,
    auth_file: Var,
    sentinel_auth: Var,
    pool_size: Var,
    timeout: Var,
    op_timeout: Var,
    connect_timeout: Var,
}

/// The main Redis.
pub(super) const MAIN: RedisVars = RedisVars {
    main: true,
    url: vars::redis_url,
    kind: vars::redis_type,
    tls: vars::redis_tls,
    auth: vars::redis_auth,
    auth_file: vars::redis_auth_file,
    sentinel_auth: vars::redis_sentinel_auth,
    pool_size: vars::redis_pool_size,
    timeout: vars::redis_timeout,
    op_timeout: vars::redis_op_timeout,
    connect_timeout: vars::redis_connect_timeout,
};

/// The per-second Redis (`redis_persecond`).
pub(super) const PER_SECOND: RedisVars = RedisVars {
    main: false,
    url: vars::redis_persecond_url,
    kind: vars::redis_persecond_type,
    tls: vars::redis_persecond_tls,
    auth: vars::redis_persecond_auth,
    auth_file: vars::redis_persecond_auth_file,
    sentinel_auth: vars::redis_persecond_sentinel_auth,
    pool_size: vars::redis_persecond_pool_size,
    timeout: vars::redis_persecond_timeout,
    op_timeout: vars::redis_persecond_op_timeout,
    connect_timeout: vars::redis_persecond_connect_timeout,
};

/// Resolves one Redis from its variables; flags apply to the main Redis
/// only (and `--redis-persecond-url`).
pub(super) fn redis_config<'a>(
    args: &StoreArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    v: &RedisVars,
) -> Result<RedisConfig, SettingsError> {
    let main = v.main;
    let url = if main {
        args.redis_url.clone()
    } else {
        args.redis_persecond_url.clone()
    }
    .or_else(|| get(v.url.name).map(str::to_owned))
    .unwrap_or_else(|| "127.0.0.1:6379".to_owned());
    let flag_of = |flag: Option<Duration>| flag.filter(|_| main);
    let mode = choice(
        if main { args.redis_type } else { None },
        get(v.kind.name),
        v.kind.name,
        "single, sentinel or cluster",
        RedisType::Single,
    )?;
    let tls_on = boolean(args.redis_tls.filter(|_| main), get(v.tls.name), v.tls.name)?;
    let path =
        |flag: &Option<PathBuf>, var: &str| flag.clone().or_else(|| get(var).map(PathBuf::from));
    let tls = if tls_on {
        let skip = boolean(
            args.redis_tls_skip_hostname_verification,
            get(vars::redis_tls_skip_hostname_verification.name),
            vars::redis_tls_skip_hostname_verification.name,
        )?;
        Some(RedisTls {
            ca_cert: path(&args.redis_tls_cacert, vars::redis_tls_cacert.name),
            client_cert: path(
                &args.redis_tls_client_cert,
                vars::redis_tls_client_cert.name,
            ),
            client_key: path(&args.redis_tls_client_key, vars::redis_tls_client_key.name),
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
        auth: auth(args, get, v)?,
        sentinel_auth: if main {
            args.redis_sentinel_auth.clone()
        } else {
            None
        }
        .or_else(|| get(v.sentinel_auth.name).map(str::to_owned)),
        pool_size: number(
            if main { args.redis_pool_size } else { None },
            get(v.pool_size.name),
            v.pool_size.name,
            2,
        )?
        .max(1),
        // The reference's redis_op_timeout bounds each call; when set (not
        // 0) it wins over redis_timeout, which floodgate already reads so.
        timeout: match duration(
            flag_of(args.redis_op_timeout),
            get(v.op_timeout.name),
            v.op_timeout.name,
            Duration::ZERO,
        )? {
            Duration::ZERO => timeout(
                flag_of(args.redis_timeout),
                get(v.timeout.name),
                v.timeout.name,
                Duration::from_millis(100),
            )?,
            op_timeout => op_timeout,
        },
        connect_timeout: timeout(
            flag_of(args.redis_connect_timeout),
            get(v.connect_timeout.name),
            v.connect_timeout.name,
            Duration::from_secs(1),
        )?,
        key_prefix: key_prefix(args, get),
        expiration_jitter_max_secs: expiration_jitter(args, get)?,
        startup_backoff: (
            duration(
                args.redis_startup_initial_interval,
                get(vars::redis_startup_initial_interval.name),
                vars::redis_startup_initial_interval.name,
                Duration::from_millis(100),
            )?
            .max(Duration::from_millis(1)),
            duration(
                args.redis_startup_max_interval,
                get(vars::redis_startup_max_interval.name),
                vars::redis_startup_max_interval.name,
                Duration::from_secs(5),
            )?,
        ),
        // One setting for both Redis stores, as in the reference.
        redial_on_readonly: match (
            args.redis_close_connection_on_readonly_error,
            get(vars::redis_close_connection_on_readonly_error.name),
        ) {
            (None, None) => true,
            (flag, env) => boolean(
                flag,
                env,
                vars::redis_close_connection_on_readonly_error.name,
            )?,
        },
    })
}

/// `cache_key_prefix`, shared by the Redis and memcached stores.
pub(super) fn key_prefix<'a>(args: &StoreArgs, get: &impl Fn(&str) -> Option<&'a str>) -> String {
    args.cache_key_prefix
        .clone()
        .or_else(|| get(vars::cache_key_prefix.name).map(str::to_owned))
        .unwrap_or_default()
}

/// `expiration_jitter_max_seconds`, shared by the Redis and memcached
/// stores.
pub(super) fn expiration_jitter<'a>(
    args: &StoreArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<u64, SettingsError> {
    number(
        args.expiration_jitter_max_seconds,
        get(vars::expiration_jitter_max_seconds.name),
        vars::expiration_jitter_max_seconds.name,
        300,
    )
}

/// The password of one Redis: inline (flag or variable) or read from a file
/// (trailing CR/LF stripped, as the reference's pull request #1240 reads
/// it). Both at once, or an empty or unreadable file, is refused.
fn auth<'a>(
    args: &StoreArgs,
    get: &impl Fn(&str) -> Option<&'a str>,
    v: &RedisVars,
) -> Result<Option<String>, SettingsError> {
    let inline = if v.main {
        args.redis_auth.clone()
    } else {
        None
    }
    .or_else(|| get(v.auth.name).map(str::to_owned));
    let file = if v.main {
        args.redis_auth_file.clone()
    } else {
        None
    }
    .or_else(|| get(v.auth_file.name).map(PathBuf::from));
    let Some(file) = file else {
        return Ok(inline);
    };
    if inline.is_some() {
        return Err(SettingsError::Conflict {
            reason: format!(
                "{} and {} are both set: give the password one way",
                v.auth.name, v.auth_file.name
            ),
        });
    }
    let invalid = |reason: String| SettingsError::Invalid {
        setting: v.auth_file.name.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(&file)
        .map_err(|err| invalid(format!("cannot read {}: {err}", file.display())))?;
    let password = text.trim_end_matches(['\r', '\n']);
    if password.is_empty() {
        return Err(invalid(format!("{} is empty", file.display())));
    }
    Ok(Some(password.to_owned()))
}
