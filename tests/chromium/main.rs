//! Tests that need Chromium (`/usr/bin/chromium`, headless): the live page.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns may unwrap

#[path = "../support/mod.rs"]
mod support;

mod page;
