//! `kittens compile` (being written).

#[derive(clap::Args)]
pub struct Args {
    /// Print one JSON document on stdout.
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`kittens compile` is not implemented yet")
}
