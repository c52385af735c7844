//! The webhook fuzz target at length: `cargo run --release -p tgq-drill --bin fuzz-webhook --
//! --inputs 1000000 --seed 16`. Prints the inputs run, the time, inputs per second and every
//! violation; exits 1 when a property broke.

use std::process::ExitCode;
use std::time::Instant;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> ExitCode {
    let inputs = arg("--inputs", 1_000_000);
    let seed = arg("--seed", 16);
    // The front logs every refusal; at a million inputs that is the run's whole cost.
    let started = Instant::now();
    let violations = tgq_drill::fuzz::run(seed, inputs);
    let elapsed = started.elapsed();
    println!(
        "fuzz-webhook: {inputs} inputs (seed {seed}) in {:.1} s, {:.0} inputs/s, {} violations",
        elapsed.as_secs_f64(),
        inputs as f64 / elapsed.as_secs_f64(),
        violations.len()
    );
    for violation in &violations {
        println!(
            "  #{} {}: {}",
            violation.index, violation.what, violation.input
        );
    }
    if violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
