//! The progress line while a scenario runs: acknowledged and replied so far, and the time.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tgq_fake_telegram::FakeTelegram;

use crate::plan::Plan;
use crate::poster::Poster;
use crate::scenario::Scenario;

/// Where progress goes; quiet in `--json` mode and in tests.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    /// Whether to show anything.
    pub enabled: bool,
}

/// The progress of one scenario, redrawn until [`ScenarioProgress::done`].
pub struct ScenarioProgress {
    stop: Arc<AtomicBool>,
}

impl Progress {
    /// Starts showing the progress of `scenario`.
    pub fn scenario(
        &self,
        scenario: &Scenario,
        target: &str,
        plan: &Plan,
        poster: &Poster,
        fake: &FakeTelegram,
    ) -> ScenarioProgress {
        let stop = Arc::new(AtomicBool::new(false));
        if !self.enabled {
            return ScenarioProgress { stop };
        }
        let label = format!("{target} #{:<2} {:<18}", scenario.number, scenario.name);
        let total = plan.updates.len();
        let (poster, fake, flag) = (poster.clone(), fake.clone(), stop.clone());
        let terminal = std::io::stderr().is_terminal();
        tokio::spawn(async move {
            let started = Instant::now();
            let mut last_line = Instant::now();
            while !flag.load(Ordering::SeqCst) {
                let acknowledged = poster.posted().acknowledged.len();
                let replied = fake
                    .delivered()
                    .iter()
                    .filter(|c| c.method == "sendMessage")
                    .count();
                let width = 24;
                let filled = (replied.min(total) * width) / total.max(1);
                let bar: String = "█".repeat(filled) + &"░".repeat(width - filled);
                let line = format!(
                    "{label} ▕{bar}▏ {acknowledged}/{total} acknowledged, {replied} replies, {:>4}s",
                    started.elapsed().as_secs()
                );
                if terminal {
                    eprint!("\r{line}\x1b[K");
                } else if last_line.elapsed() >= Duration::from_secs(10) {
                    eprintln!("{line}");
                    last_line = Instant::now();
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            if terminal {
                eprint!("\r\x1b[K");
            }
        });
        ScenarioProgress { stop }
    }
}

impl ScenarioProgress {
    /// Stops redrawing.
    pub fn done(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Drop for ScenarioProgress {
    fn drop(&mut self) {
        self.done();
    }
}
