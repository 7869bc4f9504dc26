//! Declarations of who may use the operator views and what they show:
//! trusted networks, bearer tokens, redaction of secret descriptor values.

use super::Var;

/// `admin_trusted_networks`.
pub(crate) const admin_trusted_networks: Var = Var {
    name: "ADMIN_TRUSTED_NETWORKS",
    flag: "admin-trusted-networks",
    default: "`127.0.0.0/8,::1/128`",
    doc: "Comma-separated CIDRs whose clients use the operator views (`/explain`, `/top`, `/history`, `/`, `/rlqs`) without a token; empty: none",
};

/// `admin_tokens_file`.
pub(crate) const admin_tokens_file: Var = Var {
    name: "ADMIN_TOKENS_FILE",
    flag: "admin-tokens-file",
    default: "(none: only {admin_trusted_networks})",
    doc: "File of `NAME:TOKEN` lines (`#` comments, tokens of 16 characters or more, an optional `:write` scope); other clients send `Authorization: Bearer TOKEN`; reloaded on change",
};

/// `redact_descriptor_keys`.
pub(crate) const redact_descriptor_keys: Var = Var {
    name: "REDACT_DESCRIPTOR_KEYS",
    flag: "redact-descriptor-keys",
    default: "(none)",
    doc: "Comma-separated descriptor keys whose values are secret in every rule (as a rule's `redact: true`): shown as `~` and an HMAC tag outside the counting",
};

/// `redact_key_file`.
pub(crate) const redact_key_file: Var = Var {
    name: "REDACT_KEY_FILE",
    flag: "redact-key-file",
    default: "(none: a random key per process)",
    doc: "Key of the redaction tags (32 bytes or more): instances sharing it show one tag for one value",
};

/// `redact_store_keys`.
pub(crate) const redact_store_keys: Var = Var {
    name: "REDACT_STORE_KEYS",
    flag: "redact-store-keys",
    default: "false",
    doc: "Redis and memcached keys and the embedded store's snapshots hold the tag of a secret value instead of the value (the reference's key scheme changes)",
};
