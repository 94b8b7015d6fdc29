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

/// Every measured status points at a section of this repository's docs (`docs/performance.md#...`,
/// a heading's anchor as GitHub writes it), so that `kittens list` never cites evidence that is not
/// there; the section cites the results folder.
#[test]
fn measured_evidence_is_in_the_repository() {
    use kittens_kernels::registry::{Status, ALL};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let anchor = |heading: &str| -> String {
        heading
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect()
    };
    let mut cited = 0;
    for entry in &ALL {
        for plan in entry.targets {
            if let Status::Measured { evidence } = plan.status {
                let (file, section) = evidence.split_once('#').unwrap_or((evidence, ""));
                let text = std::fs::read_to_string(root.join(file))
                    .unwrap_or_else(|e| panic!("{}: {evidence}: {e}", entry.name));
                let found = text
                    .lines()
                    .filter_map(|l| l.strip_prefix("## "))
                    .any(|h| anchor(h) == section);
                assert!(found, "{}: {file} has no section #{section}", entry.name);
                cited += 1;
            }
        }
    }
    assert!(cited >= 4, "only {cited} measured targets");
}
