//! Draws one [`Chart`] as SVG text with `plotters` (its SVG backend only: the text is left
//! to the viewer's sans-serif font, no font files are read): a caption, labelled axes with a
//! light grid, one coloured line per series and a legend naming them.

use plotters::prelude::*;

use super::Chart;

/// The picture's size in pixels.
const SIZE: (u32, u32) = (960, 540);

/// The lines' colours, in series order (then around again).
const COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The axes' ranges: x from 0 (or the least value, if negative) to a little past the
/// greatest; y from 0 to 1 for a CDF, else to a third above the greatest (at least 1), which
/// leaves the legend room above the lines.
fn bounds(chart: &Chart) -> ((f64, f64), (f64, f64)) {
    let points = chart.series.iter().flat_map(|s| s.points.iter());
    let (mut x_lo, mut x_hi, mut y_hi) = (0.0_f64, 0.0_f64, 0.0_f64);
    for &(x, y) in points {
        x_lo = x_lo.min(x);
        x_hi = x_hi.max(x);
        y_hi = y_hi.max(y);
    }
    let x_hi = if x_hi > x_lo { x_hi * 1.03 } else { x_lo + 1.0 };
    let y = if chart.cdf {
        (0.0, 1.0)
    } else {
        (0.0, (y_hi * 1.3).max(1.0))
    };
    ((x_lo, x_hi), y)
}

/// The SVG text of `chart`; an error says what plotters could not draw.
pub fn render(chart: &Chart) -> Result<String, String> {
    let mut out = String::new();
    draw(chart, &mut out).map_err(|e| format!("drawing {}: {e}", chart.file))?;
    Ok(out)
}

fn draw<'a>(chart: &'a Chart, out: &'a mut String) -> Result<(), Box<dyn std::error::Error + 'a>> {
    let root = SVGBackend::with_string(out, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let ((x0, x1), (y0, y1)) = bounds(chart);
    let mut plot = ChartBuilder::on(&root)
        .caption(&chart.title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(x0..x1, y0..y1)?;
    plot.configure_mesh()
        .x_desc(chart.x_label)
        .y_desc(chart.y_label)
        .max_light_lines(4)
        .light_line_style(RGBColor(242, 242, 242))
        .bold_line_style(RGBColor(215, 215, 215))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .draw()?;
    for (i, series) in chart.series.iter().enumerate() {
        let colour = COLOURS.get(i % COLOURS.len()).copied().unwrap_or(BLACK);
        plot.draw_series(LineSeries::new(
            series.points.iter().copied(),
            colour.stroke_width(2),
        ))?
        .label(series.name.as_str())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], colour.stroke_width(3)));
    }
    let position = if chart.cdf {
        SeriesLabelPosition::LowerRight
    } else {
        SeriesLabelPosition::UpperRight
    };
    plot.configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 15))
        .draw()?;
    root.present()?;
    Ok(())
}
