//! `cloudwatchAlarm` protections against moto's CloudWatch, alarms moved
//! between states with SetAlarmState as an alarm's metric would.

use std::time::Duration;

use aws_sdk_cloudwatch::types::{ComparisonOperator, StateValue, Statistic};
use vergence_metrics::{CloudwatchAlarms, Reading};
use vergence_model::CloudwatchAlarmCheck;
use vergence_testkit::{SQS_URL, endpoint, unique_name};

const LIMIT: Duration = Duration::from_secs(10);

async fn client(url: &str) -> aws_sdk_cloudwatch::Client {
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .endpoint_url(url)
        .region(aws_config::Region::new("eu-west-1"))
        .credentials_provider(aws_sdk_cloudwatch::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    aws_sdk_cloudwatch::Client::new(&sdk)
}

async fn alarm(client: &aws_sdk_cloudwatch::Client, name: &str) {
    client
        .put_metric_alarm()
        .alarm_name(name)
        .namespace("Shop")
        .metric_name("Errors")
        .statistic(Statistic::Sum)
        .period(60)
        .evaluation_periods(1)
        .threshold(5.0)
        .comparison_operator(ComparisonOperator::GreaterThanThreshold)
        .send()
        .await
        .unwrap();
}

async fn set(client: &aws_sdk_cloudwatch::Client, name: &str, state: StateValue) {
    client
        .set_alarm_state()
        .alarm_name(name)
        .state_value(state)
        .state_reason("set by the test")
        .send()
        .await
        .unwrap();
}

#[tokio::test]
async fn alarms_fail_the_check_while_one_is_in_alarm() {
    let Some(url) = endpoint(SQS_URL) else {
        return;
    };
    let client = client(&url).await;
    let (errors, latency) = (unique_name("errors"), unique_name("latency"));
    alarm(&client, &errors).await;
    alarm(&client, &latency).await;
    set(&client, &errors, StateValue::Ok).await;
    set(&client, &latency, StateValue::Ok).await;
    let alarms = CloudwatchAlarms::new(client.clone());
    let check = CloudwatchAlarmCheck {
        names: vec![errors.clone(), latency.clone()],
        region: None,
    };
    assert_eq!(
        alarms.read_check(&check, LIMIT).await,
        Reading::Pass("2 alarms not in ALARM (0 with insufficient data)".into())
    );

    set(&client, &latency, StateValue::Alarm).await;
    assert_eq!(
        alarms.read_check(&check, LIMIT).await,
        Reading::Fail(format!("alarm {latency} is in ALARM: set by the test"))
    );

    set(&client, &latency, StateValue::Ok).await;
    assert!(matches!(
        alarms.read_check(&check, LIMIT).await,
        Reading::Pass(_)
    ));
}

#[tokio::test]
async fn a_missing_alarm_or_an_unreachable_cloudwatch_is_inconclusive() {
    let Some(url) = endpoint(SQS_URL) else {
        return;
    };
    let client = client(&url).await;
    let present = unique_name("present");
    alarm(&client, &present).await;
    set(&client, &present, StateValue::Ok).await;
    let gone = unique_name("gone");
    let check = CloudwatchAlarmCheck {
        names: vec![present, gone.clone()],
        region: None,
    };
    assert_eq!(
        CloudwatchAlarms::new(client)
            .read_check(&check, LIMIT)
            .await,
        Reading::Inconclusive(format!("no CloudWatch alarm named {gone} in eu-west-1"))
    );

    let down = format!("http://127.0.0.1:{}", vergence_testkit::free_port());
    let unreachable = CloudwatchAlarms::new(self::client(&down).await);
    let Reading::Inconclusive(why) = unreachable.read_check(&check, LIMIT).await else {
        panic!("an unreachable CloudWatch is no reading");
    };
    assert!(
        why.starts_with("DescribeAlarms in eu-west-1 failed: "),
        "{why}"
    );
}
