//! Calls to the operator views, by view and by what the access layer
//! answered (`ratelimit_admin_requests_total{view, result}`). Every label
//! set is fixed.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// An operator view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// `POST /explain`.
    Explain,
    /// `GET /top`.
    Top,
    /// `GET /history`.
    History,
    /// `GET /`, the live page.
    Page,
    /// `GET /rlqs`.
    Rlqs,
    /// The limit-table API: `/v1/tables...` and `/v1/audit`.
    Tables,
}

impl View {
    const ALL: [Self; 6] = [
        Self::Explain,
        Self::Top,
        Self::History,
        Self::Page,
        Self::Rlqs,
        Self::Tables,
    ];

    /// The `view` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Explain => "explain",
            Self::Top => "top",
            Self::History => "history",
            Self::Page => "page",
            Self::Rlqs => "rlqs",
            Self::Tables => "tables",
        }
    }
}

/// What the access layer answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminResult {
    /// Let through.
    Ok,
    /// 401: no token, or not a valid one.
    Unauthenticated,
    /// 403: outside the trusted networks, and no tokens file.
    Forbidden,
}

impl AdminResult {
    const ALL: [Self; 3] = [Self::Ok, Self::Unauthenticated, Self::Forbidden];

    /// The `result` label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Unauthenticated => "unauthenticated",
            Self::Forbidden => "forbidden",
        }
    }
}

/// View calls, by view and result.
#[derive(Debug, Default)]
pub struct AdminMetrics {
    calls: [[AtomicU64; 3]; 6],
}

impl AdminMetrics {
    /// One call to `view`, answered `result`.
    pub fn record(&self, view: View, result: AdminResult) {
        if let Some(count) = self
            .calls
            .get(view as usize)
            .and_then(|row| row.get(result as usize))
        {
            count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Appends the counter in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let name = "ratelimit_admin_requests_total";
        let _ = writeln!(
            out,
            "# HELP {name} Calls to the operator views, by view and by the access layer's answer.\n# TYPE {name} counter"
        );
        for (view, row) in View::ALL.iter().zip(&self.calls) {
            for (result, count) in AdminResult::ALL.iter().zip(row) {
                let _ = writeln!(
                    out,
                    "{name}{{view=\"{}\",result=\"{}\"}} {}",
                    view.as_str(),
                    result.as_str(),
                    count.load(Ordering::Relaxed)
                );
            }
        }
    }
}
