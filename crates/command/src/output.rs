//! The command's own output on stdout and stderr. A reader that goes away (`tgq local --demo | head
//! -1`, a closed terminal) ends that output quietly: every later line is dropped, where `println!`
//! would panic on the broken pipe. What the process is doing goes on — a server keeps serving, the
//! demo finishes — and what it would have printed was for a reader that no longer exists.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_GONE: AtomicBool = AtomicBool::new(false);
static STDERR_GONE: AtomicBool = AtomicBool::new(false);

/// Prints a line on stdout, or nothing once stdout has failed.
macro_rules! outln {
    () => {
        $crate::output::stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::output::stdout_line(format_args!($($arg)*))
    };
}

/// Prints a line on stderr, or nothing once stderr has failed.
macro_rules! errln {
    ($($arg:tt)*) => {
        $crate::output::stderr_line(format_args!($($arg)*))
    };
}

/// `outln!`'s writer.
pub fn stdout_line(line: fmt::Arguments<'_>) {
    write_line(&mut io::stdout().lock(), &STDOUT_GONE, line);
}

/// `errln!`'s writer.
pub fn stderr_line(line: fmt::Arguments<'_>) {
    write_line(&mut io::stderr().lock(), &STDERR_GONE, line);
}

fn write_line(out: &mut impl Write, gone: &AtomicBool, line: fmt::Arguments<'_>) {
    if gone.load(Ordering::Relaxed) {
        return;
    }
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        gone.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer whose reader has gone.
    struct ClosedPipe {
        attempts: usize,
    }

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.attempts += 1;
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_broken_pipe_ends_the_output_without_a_panic_and_later_lines_are_not_tried() {
        let gone = AtomicBool::new(false);
        let mut pipe = ClosedPipe { attempts: 0 };
        write_line(&mut pipe, &gone, format_args!("first"));
        write_line(&mut pipe, &gone, format_args!("second"));
        assert!(gone.load(Ordering::Relaxed));
        assert_eq!(pipe.attempts, 1);
    }
}
