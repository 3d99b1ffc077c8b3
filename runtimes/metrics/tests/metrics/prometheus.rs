//! `prometheus` protections against a real Prometheus, scraping (every
//! second) an exporter whose error ratio the test sets.

use std::time::Duration;

use jiff::SignedDuration;
use vergence_metrics::{PrometheusChecks, Reading};
use vergence_model::{Bound, PrometheusCheck, Threshold};
use vergence_testkit::free_port;
use vergence_testkit::prometheus::{Exporter, Prometheus};

fn check(url: &str, query: &str, max: f64, for_secs: i64) -> PrometheusCheck {
    PrometheusCheck {
        url: url.to_owned(),
        query: query.to_owned(),
        threshold: Threshold {
            min: None,
            max: Some(Bound(max)),
        },
        for_: SignedDuration::from_secs(for_secs),
    }
}

const LIMIT: Duration = Duration::from_secs(5);

/// Reads `check` until `done` accepts the reading (Prometheus scrapes once
/// a second), or panics with the last one after 30 s.
async fn read_until(
    checks: &PrometheusChecks,
    check: &PrometheusCheck,
    done: impl Fn(&Reading) -> bool,
) -> Reading {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let reading = checks.read_check(check, LIMIT).await;
        if done(&reading) {
            return reading;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "last reading: {reading:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_query_passes_while_healthy_and_fails_once_the_error_ratio_rises() {
    let exporter = Exporter::start(0.01);
    let Some(prometheus) = Prometheus::start(&exporter) else {
        return;
    };
    let checks = PrometheusChecks::new(reqwest::Client::new());
    let ratio = check(
        &prometheus.url,
        r#"shop_error_ratio{service="web"}"#,
        0.05,
        0,
    );

    // Before the first scrape there is no series: no pass by default.
    let first = checks.read_check(&ratio, LIMIT).await;
    assert!(!matches!(first, Reading::Fail(_)), "{first:?}");
    let healthy = read_until(&checks, &ratio, |r| matches!(r, Reading::Pass(_))).await;
    assert_eq!(healthy, Reading::Pass("1 series at most 0.05: 0.01".into()));

    exporter.set(0.4);
    let failing = read_until(&checks, &ratio, |r| !matches!(r, Reading::Pass(_))).await;
    let Reading::Fail(why) = failing else {
        panic!("{failing:?}");
    };
    assert!(
        why.contains(r#"shop_error_ratio{instance="127.0.0.1:"#)
            && why.ends_with("= 0.4 is above max 0.05"),
        "{why}"
    );

    exporter.set(0.02);
    read_until(&checks, &ratio, |r| matches!(r, Reading::Pass(_))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn with_for_a_breach_fails_only_once_it_lasted_that_long() {
    let exporter = Exporter::start(0.01);
    let Some(prometheus) = Prometheus::start(&exporter) else {
        return;
    };
    let checks = PrometheusChecks::new(reqwest::Client::new());
    let instant = check(&prometheus.url, "shop_error_ratio", 0.05, 0);
    let lasting = check(&prometheus.url, "shop_error_ratio", 0.05, 4);
    read_until(&checks, &instant, |r| matches!(r, Reading::Pass(_))).await;
    // Let the healthy values fill the window before the breach starts.
    tokio::time::sleep(Duration::from_secs(5)).await;

    exporter.set(0.5);
    read_until(&checks, &instant, |r| matches!(r, Reading::Fail(_))).await;
    let Reading::Pass(pending) = checks.read_check(&lasting, LIMIT).await else {
        panic!("a breach younger than `for` is pending, not a failure");
    };
    assert!(pending.contains("pending: "), "{pending}");
    let Reading::Fail(why) = read_until(&checks, &lasting, |r| matches!(r, Reading::Fail(_))).await
    else {
        unreachable!()
    };
    assert!(why.ends_with("= 0.5 is above max 0.05 for 4s"), "{why}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_that_cannot_answer_is_inconclusive_never_a_pass() {
    let exporter = Exporter::start(0.01);
    let Some(prometheus) = Prometheus::start(&exporter) else {
        return;
    };
    let checks = PrometheusChecks::new(reqwest::Client::new());
    let healthy = check(&prometheus.url, "shop_error_ratio", 0.05, 0);
    read_until(&checks, &healthy, |r| matches!(r, Reading::Pass(_))).await;

    // A query Prometheus refuses.
    let refused = check(&prometheus.url, "sum(shop_error_ratio", 0.05, 0);
    let Reading::Inconclusive(why) = checks.read_check(&refused, LIMIT).await else {
        panic!("a refused query is no reading");
    };
    assert!(why.contains("refused the query: bad_data"), "{why}");
    // A series that does not exist.
    let none = check(&prometheus.url, "shop_latency_seconds", 0.05, 0);
    let Reading::Inconclusive(why) = checks.read_check(&none, LIMIT).await else {
        panic!("no series is no reading");
    };
    assert!(why.starts_with("the query returned no series"), "{why}");
    // Nothing listening.
    let down = format!("http://127.0.0.1:{}", free_port());
    let Reading::Inconclusive(why) = checks.read_check(&check(&down, "up", 1.0, 0), LIMIT).await
    else {
        panic!("an unreachable server is no reading");
    };
    assert!(
        why.starts_with(&format!("cannot reach Prometheus at {down}")),
        "{why}"
    );
}
