//! Pure, clock-injected counting math. No I/O, no descriptors: each algorithm
//! takes its state, `now` and the hits, and says what the counter becomes.
//! Stores (memory and, in Lua, Redis) run exactly these rules.

pub mod fixed_window;

pub use fixed_window::FixedWindow;
