//! A small SVG line chart: p95 latency against corpus size (log scale).

use std::fmt::Write;

/// One line of the chart.
pub struct Series<'a> {
    pub name: &'a str,
    pub color: &'a str,
    pub points: Vec<(f64, f64)>,
}

pub fn p95_chart(series: &[Series<'_>]) -> String {
    let (w, h, left, right, top, bottom) = (720.0, 420.0, 70.0, 170.0, 30.0, 50.0);
    let xs: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0.log10())).collect();
    let ys: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).collect();
    let (x0, x1) = (xs.iter().cloned().fold(f64::MAX, f64::min), xs.iter().cloned().fold(f64::MIN, f64::max));
    let y1 = ys.iter().cloned().fold(0.0, f64::max) * 1.1 + 1e-9;
    let x_span = if x1 > x0 { x1 - x0 } else { 1.0 };
    let px = |x: f64| left + (x.log10() - x0) / x_span * (w - left - right);
    let py = |y: f64| h - bottom - y / y1 * (h - top - bottom);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{left}" y="18" font-size="14">p95 latency (ms) by corpus size</text>
<line x1="{left}" y1="{}" x2="{}" y2="{}" stroke="black"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}" stroke="black"/>
"#,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom
    );
    for i in 0..=4 {
        let y = y1 * i as f64 / 4.0;
        let _ = writeln!(svg, r#"<text x="{}" y="{}" text-anchor="end">{y:.1}</text>"#, left - 6.0, py(y) + 4.0);
    }
    let mut sizes: Vec<f64> = series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    sizes.sort_by(f64::total_cmp);
    sizes.dedup();
    for x in sizes {
        let _ =
            writeln!(svg, r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#, px(x), h - bottom + 18.0, x as u64);
    }
    for (i, s) in series.iter().enumerate() {
        let path: Vec<String> = s.points.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            s.color,
            path.join(" ")
        );
        for (x, y) in &s.points {
            let _ = writeln!(svg, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#, px(*x), py(*y), s.color);
        }
        let ly = top + 20.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            w - right + 15.0,
            ly,
            s.color,
            w - right + 32.0,
            ly + 10.0,
            s.name
        );
    }
    svg.push_str("</svg>\n");
    svg
}
