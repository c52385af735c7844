//! The shop bot's one binary, for every role: its own `tgq` command (`cargo run -p
//! tgq-example-shop -- local`, or the installed `tgq` in this folder) and, built as `tgq deploy`
//! builds it, the stack's webhook and worker functions, as `TGQ_FUNCTION` in their environment says.

fn main() -> std::process::ExitCode {
    tgq::main(tgq_example_shop::handlers)
}
