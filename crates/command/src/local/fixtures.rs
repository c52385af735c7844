//! The example updates of `events/`, embedded at build time (see `build.rs`) so that
//! `tgq local --demo` works from any directory.

include!(concat!(env!("OUT_DIR"), "/fixtures.rs"));
