//! Declarations of who may use the operator views: trusted networks and
//! bearer tokens.

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
