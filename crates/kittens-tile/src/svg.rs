//! The bank picture of a [`BankReport`], after HipKittens Fig. 4 and Fig. 20: the region's elements as a
//! grid in logical (row, col) order, each cell coloured by the bank its bytes live in after the swizzle and
//! labelled with the lane whose address reads or writes it; the cells of the first phase of the first
//! instruction are drawn solid with a dark border, the others faded.

use crate::BankReport;
use kittens_hw::lds;
use std::collections::HashMap;
use std::fmt::Write;

const CELL_W: u32 = 26;
const CELL_H: u32 = 24;
const MARGIN: u32 = 34;
const HEADER: u32 = 44;

/// An SVG document picturing `report`.
pub fn bank_svg(report: &BankReport) -> String {
    let (rows, cols) = report.region;
    let instr = report.instr;
    let eb = report.shared.dtype.bytes();
    let first_phase: Vec<u32> = instr.phase_lanes().into_iter().next().unwrap_or_default();
    // (row, col) -> (instruction, lane, physical byte address).
    let mut who: HashMap<(u32, u32), (usize, u32, u32)> = HashMap::new();
    for (i, iss) in report.issues.iter().enumerate() {
        for (lane, (addr, es)) in iss.addrs.iter().zip(&iss.elems).enumerate() {
            if let Some(a) = addr {
                for (k, &e) in es.iter().enumerate() {
                    who.entry(e).or_insert((i, lane as u32, a + k as u32 * eb));
                }
            }
        }
    }
    let width = 2 * MARGIN + cols * CELL_W;
    let height = HEADER + MARGIN + rows * CELL_H + 10;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="monospace">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let first_degrees: Vec<u32> = report
        .phases
        .iter()
        .filter(|p| p.instruction == 0)
        .map(|p| p.conflict)
        .collect();
    let title = format!(
        "{} {}x{} {} {} layout, swizzle {}: max conflict {}",
        instr,
        rows,
        cols,
        report.shared.dtype,
        report.reg.layout,
        report.shared.swizzle.name(),
        report.max_conflict
    );
    let sub = format!(
        "colour and bN = bank ({} banks of 4 B), number = lane; solid = phase 0 of instruction 0; instruction 0 phases: {:?}",
        instr.info().banks,
        first_degrees
    );
    let _ = writeln!(
        s,
        r#"<text x="{MARGIN}" y="18" font-size="13">{}</text>"#,
        escape(&title)
    );
    let _ = writeln!(
        s,
        r#"<text x="{MARGIN}" y="34" font-size="10">{}</text>"#,
        escape(&sub)
    );
    for c in (0..cols).step_by(4) {
        let x = MARGIN + c * CELL_W + CELL_W / 2;
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" font-size="9" text-anchor="middle">{c}</text>"#,
            HEADER - 1
        );
    }
    for r in 0..rows {
        let y = HEADER + r * CELL_H;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="9" text-anchor="end">{r}</text>"#,
            MARGIN - 4,
            y + 14
        );
        for c in 0..cols {
            let x = MARGIN + c * CELL_W;
            s.push_str(&cell(x, y, who.get(&(r, c)).copied(), instr, &first_phase));
        }
    }
    s.push_str("</svg>\n");
    s
}

/// One grid cell: bank colour, lane label, phase-0 highlight and a tooltip.
fn cell(
    x: u32,
    y: u32,
    who: Option<(usize, u32, u32)>,
    instr: lds::DsInstr,
    first: &[u32],
) -> String {
    let Some((i, lane, addr)) = who else {
        return format!(
            r##"<rect x="{x}" y="{y}" width="{CELL_W}" height="{CELL_H}" fill="#eeeeee" stroke="#cccccc"/>"##
        );
    };
    let bank = lds::bank(instr, addr);
    let hot = i == 0 && first.contains(&lane);
    let (opacity, stroke, sw) = if hot {
        (1.0, "#000000", 1.6)
    } else {
        (0.35, "#ffffff", 0.5)
    };
    // Hue from the bank's low 4 bits (banks 8 apart get opposite hues), lightness from the high bits.
    let hue = (bank % 16) as f64 * 22.5;
    let light = [55, 68, 80, 90][(bank / 16 % 4) as usize];
    format!(
        concat!(
            r#"<g><title>instruction {i}, lane {lane}, byte {addr}, bank {bank}</title>"#,
            r#"<rect x="{x}" y="{y}" width="{w}" height="{h}" fill="hsl({hue:.0},70%,{light}%)" fill-opacity="{op}" "#,
            r#"stroke="{stroke}" stroke-width="{sw}"/>"#,
            r#"<text x="{tx}" y="{ty}" font-size="9" text-anchor="middle" font-weight="{fw}">{lane}</text>"#,
            r##"<text x="{bx}" y="{by}" font-size="6" text-anchor="end" fill="#333333">b{bank}</text></g>"##,
            "\n"
        ),
        i = i,
        lane = lane,
        addr = addr,
        bank = bank,
        x = x,
        y = y,
        w = CELL_W,
        h = CELL_H,
        hue = hue,
        op = opacity,
        stroke = stroke,
        sw = sw,
        tx = x + CELL_W / 2,
        ty = y + 12,
        bx = x + CELL_W - 2,
        by = y + CELL_H - 2,
        light = light,
        fw = if hot { "bold" } else { "normal" },
    )
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analyze, BaseShape, DType, Layout, RegTile, SharedTile};
    use kittens_hw::lds::DsInstr;

    /// Every element of the 16x32 tile gets a cell; 16 lanes x 8 elements are highlighted (phase 0).
    #[test]
    fn draws_every_element_and_highlights_phase_zero() {
        let shared = SharedTile::new(DType::Bf16, 16, 32).unwrap();
        let reg = RegTile::new(DType::Bf16, 16, 32, Layout::Row, BaseShape::S16X32).unwrap();
        let svg = bank_svg(&analyze(&shared, &reg, DsInstr::DsReadB128).unwrap());
        assert_eq!(svg.matches("<title>").count(), 16 * 32);
        assert_eq!(svg.matches(r#"font-weight="bold""#).count(), 16 * 8);
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
