//! `kittens bench ...` (being written).

#[derive(clap::Subcommand)]
pub enum BenchCommand {
    /// GEMM against cuBLAS.
    Gemm,
}

pub fn run(_cmd: BenchCommand) -> anyhow::Result<()> {
    anyhow::bail!("`kittens bench` is not implemented yet")
}
