//! The allocation-against-arrival plot, written as SVG by hand: a few hundred lines of text
//! need no plotting crate, and the output is a self-contained file any browser shows.
//!
//! Two panels share one legend: the whole experiment (0..=130% arrived, 0..=100% allocated),
//! where every policy follows the diagonal until the cluster fills, and a zoom on the part
//! that tells policies apart (80..=130% arrived, allocation from just below the lowest line).

use std::fmt::Write as _;

/// Line colours, one per policy in order (cycled beyond eight).
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const WIDTH: f64 = 1000.0;
const HEIGHT: f64 = 480.0;
/// Arrival (%) where the zoomed panel starts.
const ZOOM_FROM: usize = 80;
/// Highest arrival (%) plotted.
const ARRIVAL_MAX: usize = 130;

/// One panel: where it sits and which ranges it shows.
struct Panel {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
    x: (f64, f64),
    y: (f64, f64),
    x_step: usize,
    y_step: usize,
}

impl Panel {
    fn px(&self, v: f64) -> f64 {
        self.left + self.width * (v - self.x.0) / (self.x.1 - self.x.0)
    }

    fn py(&self, v: f64) -> f64 {
        self.top + self.height * (1.0 - (v - self.y.0) / (self.y.1 - self.y.0))
    }

    fn draw(&self, s: &mut String, title: &str, lines: &[(&str, &[Option<f64>])]) {
        let (l, t, w, h) = (self.left, self.top, self.width, self.height);
        let bottom = t + h;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="13">{}</text>"#,
            l + w / 2.0,
            t - 8.0,
            escape(title)
        );
        for v in (self.x.0 as usize..=self.x.1 as usize).step_by(self.x_step) {
            let x = self.px(v as f64);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{t:.1}" x2="{x:.1}" y2="{bottom:.1}" stroke="#e6e6e6"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{v}</text>"##,
                bottom + 16.0
            );
        }
        for v in (self.y.0 as usize..=self.y.1 as usize).step_by(self.y_step) {
            let y = self.py(v as f64);
            let _ = writeln!(
                s,
                r##"<line x1="{l:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e6e6e6"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"##,
                l + w,
                l - 6.0,
                y + 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}" fill="none" stroke="#333"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">arrived GPU requests (% of capacity)</text>"#,
            l + w / 2.0,
            bottom + 36.0
        );
        let (cx, cy) = (l - 42.0, t + h / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{cx:.1}" y="{cy:.1}" text-anchor="middle" transform="rotate(-90 {cx:.1} {cy:.1})">allocated GPU (% of capacity)</text>"#
        );
        let clip = format!("clip{}", l as u32);
        let _ = writeln!(
            s,
            r#"<clipPath id="{clip}"><rect x="{l:.1}" y="{t:.1}" width="{w:.1}" height="{h:.1}"/></clipPath>"#
        );
        for (i, (_, curve)) in lines.iter().enumerate() {
            let points: Vec<String> = curve
                .iter()
                .enumerate()
                .filter(|(a, _)| (*a as f64) >= self.x.0 && (*a as f64) <= self.x.1)
                .filter_map(|(a, v)| {
                    v.map(|v| format!("{:.1},{:.1}", self.px(a as f64), self.py(v)))
                })
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.8" clip-path="url(#{clip})" points="{}"/>"#,
                COLORS[i % COLORS.len()],
                points.join(" ")
            );
        }
    }
}

/// The lowest allocation any line reaches from [`ZOOM_FROM`] on, rounded down to a multiple
/// of 5 (the zoomed panel's floor; 80 without data).
fn zoom_floor(lines: &[(&str, &[Option<f64>])]) -> f64 {
    let lowest = lines
        .iter()
        .flat_map(|(_, c)| c.iter().skip(ZOOM_FROM).flatten().copied())
        .fold(f64::INFINITY, f64::min);
    if lowest.is_finite() {
        ((lowest / 5.0).floor() * 5.0).clamp(0.0, 95.0)
    } else {
        ZOOM_FROM as f64
    }
}

/// The SVG: `title` and `subtitle` on top, the two panels, the legend on the right. Each line
/// is a policy's allocation (%) at each arrival percentage 0..=130 (`None` where unknown).
pub fn svg(title: &str, subtitle: &str, lines: &[(&str, &[Option<f64>])]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="40" text-anchor="middle" fill="#555">{}</text>"##,
        WIDTH / 2.0,
        escape(subtitle)
    );
    let full = Panel {
        left: 80.0,
        top: 75.0,
        width: 340.0,
        height: 330.0,
        x: (0.0, ARRIVAL_MAX as f64),
        y: (0.0, 100.0),
        x_step: 10,
        y_step: 10,
    };
    full.draw(&mut s, "whole run", lines);
    let floor = zoom_floor(lines);
    let zoom = Panel {
        left: 520.0,
        x: (ZOOM_FROM as f64, ARRIVAL_MAX as f64),
        y: (floor, 100.0),
        x_step: 10,
        y_step: if 100.0 - floor > 20.0 { 5 } else { 1 },
        ..full
    };
    zoom.draw(
        &mut s,
        &format!("zoom: {ZOOM_FROM}..{ARRIVAL_MAX}% arrived"),
        lines,
    );
    let legend_x = zoom.left + zoom.width + 20.0;
    for (i, (name, _)) in lines.iter().enumerate() {
        let y = zoom.top + 10.0 + 22.0 * i as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{legend_x:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            legend_x + 24.0,
            COLORS[i % COLORS.len()],
            legend_x + 30.0,
            y + 4.0,
            escape(name)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(end: f64) -> Vec<Option<f64>> {
        (0..=ARRIVAL_MAX)
            .map(|a| Some((a as f64).min(end)))
            .collect()
    }

    #[test]
    fn two_panels_one_line_per_policy_and_a_legend() {
        let (a, b) = (curve(96.0), curve(91.5));
        let out = svg("t <1>", "s & t", &[("FGD", &a), ("Gantry", &b)]);
        assert!(out.starts_with("<svg") && out.ends_with("</svg>\n"));
        assert_eq!(
            out.matches("<polyline").count(),
            4,
            "two lines in each panel"
        );
        assert!(out.contains(">FGD</text>") && out.contains(">Gantry</text>"));
        assert!(out.contains("t &lt;1&gt;") && out.contains("s &amp; t"));
        // The whole run spans 0..130 x 0..100: the first point is the panel's bottom left.
        assert!(out.contains(r#"points="80.0,405.0 "#), "{out}");
        // The zoom starts at 80% arrived, its floor at 80 (the lowest value there).
        assert!(out.contains(">zoom: 80..130% arrived</text>"));
        assert!(out.contains(r#"points="520.0,405.0 "#), "{out}");
    }

    #[test]
    fn zoom_floor_follows_the_lowest_line() {
        let (a, b) = (curve(96.0), curve(87.0));
        let mut late: Vec<Option<f64>> = vec![None; ARRIVAL_MAX + 1];
        late[100] = Some(92.0);
        late[130] = Some(93.0);
        assert_eq!(zoom_floor(&[("a", &a)]), 80.0);
        assert_eq!(zoom_floor(&[("l", &late)]), 90.0);
        assert_eq!(zoom_floor(&[("l", &late), ("b", &b)]), 80.0);
        assert_eq!(zoom_floor(&[]), 80.0);
    }
}
