//! Request accounting, and the exact requests the client sends.

use google_cloud_lro::Poller;
use vergence_fake_cloud_run::FakeCloudRun;

use crate::{PARENT, service, service_name};

#[tokio::test]
async fn requests_are_counted() {
    let fake = FakeCloudRun::start().await.unwrap();
    let services = fake.services_client().await.unwrap();

    services
        .create_service()
        .set_parent(PARENT)
        .set_service_id("web")
        .set_service(service("europe-docker.pkg.dev/p/r/web:1"))
        .poller()
        .until_done()
        .await
        .unwrap();
    services
        .get_service()
        .set_name(service_name("web"))
        .send()
        .await
        .unwrap();

    let collection = format!("/v2/{PARENT}/services");
    assert_eq!(fake.count("POST", &collection), 1);
    assert_eq!(
        fake.count("GET", &format!("/v2/{}", service_name("web"))),
        1
    );
    let polls = fake.count_matching(|r| r.method == "GET" && r.path.contains("/operations/"));
    assert_eq!(polls, 2, "{:#?}", fake.requests());
    let create = fake
        .requests()
        .into_iter()
        .find(|r| r.is("POST", &collection))
        .unwrap();
    assert_eq!(create.query_param("serviceId"), Some("web"));
    assert_eq!(create.query_param("$alt"), Some("json;enum-encoding=int"));
    let body = create.body.unwrap();
    assert_eq!(
        body["template"]["containers"][0]["image"],
        "europe-docker.pkg.dev/p/r/web:1"
    );
    assert_eq!(
        body["template"]["annotations"]["vergence.dev/version"],
        "v1"
    );

    fake.reset_requests();
    assert!(fake.requests().is_empty());
    assert_eq!(fake.count("POST", &collection), 0);
}
