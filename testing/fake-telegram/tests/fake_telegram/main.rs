//! The fake Bot API's tests, one binary: its methods, faults and limits, and the shapes teloxide reads.

mod support;

mod api;
mod faults;
mod limits;
mod payments;
mod teloxide_shapes;
