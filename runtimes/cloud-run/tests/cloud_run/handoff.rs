//! A plan handed from one job to the next through the artifact store's
//! URLs: the fetch job uploads it, the apply job downloads it.

use vergence_model::Artifact;
use vergence_model::hashing::sha256_hex;

use crate::*;

#[tokio::test]
async fn a_plan_written_by_the_job_is_an_output_and_handed_to_the_next_job_as_an_input() {
    let h = Harness::start().await;
    let mut fetch = shell_job(
        "fetch-1",
        r#"printf 'plan for %s' "$VERGENCE_SERVICE_VERSION" > plan
curl -sf -T plan "$(printf %s "$VERGENCE_OUTPUT_URLS" | jq -r .plan)""#,
    );
    Arc::make_mut(&mut fetch.spec).outputs = vec!["plan".into()];

    let planned = h.run(&fetch).await;

    assert!(planned.exited_with(0), "{planned:?}");
    let [plan] = planned.outputs.as_slice() else {
        panic!("one output: {:?}", planned.outputs);
    };
    assert_eq!(plan.name, "plan");
    assert_eq!(plan.key, Artifact::output_key(&fetch.id, "plan"));
    assert_eq!(plan.sha256, sha256_hex(b"plan for v7"));

    let mut apply = shell_job(
        "apply-1",
        r#"curl -sf -o plan "$(printf %s "$VERGENCE_INPUT_URLS" | jq -r .plan)" && echo "applying $(cat plan)""#,
    );
    apply.inputs = vec![plan.clone()];

    let applied = h.run(&apply).await;

    assert!(applied.exited_with(0), "{applied:?}");
    assert_eq!(applied.stdout, "applying plan for v7\n");
    // The bytes went through the URLs: uploaded by one job, read by the other.
    assert_eq!(
        h.artifacts.url_requests(),
        [
            ("PUT".to_owned(), plan.key.clone()),
            ("GET".to_owned(), plan.key.clone())
        ]
    );
}
