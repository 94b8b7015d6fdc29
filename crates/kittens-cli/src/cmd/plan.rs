//! `kittens plan ...` (being written).

#[derive(clap::Subcommand)]
pub enum PlanCommand {
    /// Grid order and the chiplet cache model.
    Grid,
    /// Tail KV split for attention.
    Tail,
    /// Register budget of a block.
    Regs,
}

pub fn run(_cmd: PlanCommand) -> anyhow::Result<()> {
    anyhow::bail!("`kittens plan` is not implemented yet")
}
