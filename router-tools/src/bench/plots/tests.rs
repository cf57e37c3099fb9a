//! What the charts hold (CDFs, buckets, which charts appear) and that the SVG drawn for one
//! is a readable picture naming its series.

use std::collections::BTreeMap;

use super::*;

fn record(class: &str, sent_ms: f64, outcome: RecordOutcome, ttft: f64, e2e: f64) -> RequestRecord {
    let ok = outcome == RecordOutcome::Ok;
    RequestRecord {
        index: 0,
        class: class.to_owned(),
        sent_ms,
        outcome,
        status: Some(if ok { 200 } else { 503 }),
        reason: None,
        ttft_ms: ok.then_some(ttft),
        e2e_ms: e2e,
        output_tokens: ok.then_some(10),
        prompt_tokens: ok.then_some(100),
        cached_tokens: ok.then_some(25),
    }
}

#[test]
fn a_cdf_rises_to_one_through_the_sorted_values() {
    let points = cdf(vec![30.0, 10.0, 20.0, f64::NAN, 40.0]);
    assert_eq!(
        points,
        [(10.0, 0.25), (20.0, 0.5), (30.0, 0.75), (40.0, 1.0)]
    );
    let many = cdf((0..10_000).map(f64::from).collect());
    assert_eq!(many.len(), CDF_POINTS);
    assert_eq!(many.last(), Some(&(9999.0, 1.0)));
    assert!(many.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
    assert!(cdf(Vec::new()).is_empty());
    assert_eq!(cdf(vec![5.0, 5.0, 5.0, 7.0]), [(5.0, 0.75), (7.0, 1.0)]);
}

#[test]
fn buckets_are_round_and_about_sixty_to_a_run() {
    assert_eq!(bucket_secs(3.0), 1.0);
    assert_eq!(bucket_secs(200.0), 5.0);
    assert_eq!(bucket_secs(3600.0), 60.0);
    assert_eq!(bucket_secs(1e6), 600.0);
}

#[test]
fn charts_hold_a_line_per_class_and_per_outcome() {
    let mut records = Vec::new();
    for i in 0..20 {
        let t = f64::from(i) * 250.0;
        records.push(record(
            "interactive",
            t,
            RecordOutcome::Ok,
            20.0 + t / 100.0,
            100.0,
        ));
        records.push(record("batch", t, RecordOutcome::Ok, 50.0, 100.0));
    }
    records.push(record("batch", 100.0, RecordOutcome::Shed, 0.0, 2.0));
    let queue = vec![
        QueueSample {
            t_ms: 0.0,
            depth: BTreeMap::from([("batch".to_owned(), 0.0), ("interactive".to_owned(), 0.0)]),
        },
        QueueSample {
            t_ms: 500.0,
            depth: BTreeMap::from([("batch".to_owned(), 4.0), ("interactive".to_owned(), 1.0)]),
        },
    ];
    let charts = charts(&records, &queue);
    let files: Vec<&str> = charts.iter().map(|c| c.file).collect();
    assert_eq!(
        files,
        [
            "ttft-cdf",
            "e2e-cdf",
            "throughput",
            "requests",
            "hit-rate",
            "queue-depth"
        ]
    );
    let names = |c: &Chart| c.series.iter().map(|s| s.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&charts[0]), ["interactive", "batch", "all"]);
    assert_eq!(
        names(&charts[3]),
        ["ok", "shed"],
        "no errors: no errors line"
    );
    assert_eq!(names(&charts[5]), ["batch", "interactive"]);
    // Batch's TTFT is always 50 ms: one step to 1.
    assert_eq!(charts[0].series[1].points, [(50.0, 1.0)]);
    // 40 ok requests x 10 tokens over 1 s buckets: 4 answers a second, 2 per class.
    let all = &charts[2].series[2];
    assert_eq!(all.points.first(), Some(&(0.5, 80.0)));
    assert_eq!(all.points.iter().map(|p| p.1).sum::<f64>(), 400.0);
    // 25 of every 100 prompt tokens were cached.
    assert!(charts[4].series[2].points.iter().all(|p| p.1 == 25.0));

    // Nothing cached, nothing sampled, nothing ok: only what has points.
    let shed: Vec<RequestRecord> = (0..3)
        .map(|i| record("default", f64::from(i), RecordOutcome::Shed, 0.0, 1.0))
        .collect();
    let files: Vec<&str> = super::charts(&shed, &[]).iter().map(|c| c.file).collect();
    assert_eq!(files, ["requests"]);
}

#[test]
fn a_drawn_chart_is_an_svg_naming_its_series_with_one_line_each() {
    let chart = Chart {
        file: "ttft-cdf",
        title: "Time to first token (CDF)".to_owned(),
        x_label: "ms",
        y_label: "share of ok requests",
        cdf: true,
        series: vec![
            Series {
                name: "interactive".to_owned(),
                points: cdf(vec![10.0, 20.0, 30.0]),
            },
            Series {
                name: "batch".to_owned(),
                points: cdf(vec![100.0, 300.0]),
            },
        ],
    };
    let text = svg::render(&chart).unwrap_or_else(|e| panic!("{e}"));
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for want in ["Time to first token (CDF)", "interactive", "batch", "ms"] {
        assert!(texts.contains(&want), "{want:?} in {texts:?}");
    }
    // One polyline per series with all of its points (legend marks are 2-point lines).
    let lines: Vec<usize> = doc
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .filter_map(|n| n.attribute("points"))
        .map(|p| p.split_whitespace().count())
        .collect();
    assert!(lines.contains(&3) && lines.contains(&2), "{lines:?}");
}
