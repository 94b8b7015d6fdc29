//! The kernel listing names every op with its index and marks what the schedule implied.

use kittens_kernels::gemm::{build, GemmConfig};

#[test]
fn gemm_listing_shows_the_schedule() {
    let k = build(&GemmConfig::default()).unwrap();
    let text = k.to_string();
    if std::env::var_os("KITTENS_PRINT").is_some() {
        println!("{text}");
    }
    let ops = text
        .lines()
        .filter(|l| {
            l.trim_start()
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_digit())
        })
        .count();
    assert_eq!(ops, k.ops().len());
    let implied = text.lines().filter(|l| l.get(4..5) == Some("*")).count();
    assert_eq!(implied, k.ops().iter().filter(|r| r.implied).count());
    assert!(
        text.contains("if wave / 4 == 1") || text.contains("if (wave / 4) == 1"),
        "{text}"
    );
    assert!(text.contains("mma_abt c00 <- a_r, b_r0, c00"));
}

/// Every measured status points at a results folder of this repository with its README, so that
/// `kittens list` never cites evidence that is not there.
#[test]
fn measured_evidence_is_in_the_repository() {
    use kittens_kernels::registry::{Status, ALL};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cited = 0;
    for entry in &ALL {
        for plan in entry.targets {
            if let Status::Measured { evidence } = plan.status {
                let readme = root.join(evidence).join("README.md");
                assert!(
                    readme.is_file(),
                    "{}: {evidence} has no README.md",
                    entry.name
                );
                cited += 1;
            }
        }
    }
    assert!(cited >= 4, "only {cited} measured targets");
}
