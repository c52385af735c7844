//! placeholder
use crate::scenario::Scenario;
use crate::tally::Row;
use crate::Options;

pub struct Emulator;
impl Emulator {
    pub async fn start(_: &Options) -> anyhow::Result<Emulator> {
        anyhow::bail!("not yet")
    }
}
pub async fn run(_: &Scenario, _: &Options, _: &Emulator) -> anyhow::Result<Row> {
    anyhow::bail!("not yet")
}
