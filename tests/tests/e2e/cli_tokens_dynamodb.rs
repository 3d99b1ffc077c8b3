//! `vergence token` against a serverless deployment's table (DynamoDB
//! Local here): tokens for the API Lambda are created where it reads them.
//! Here rather than with the CLI's tests, which link no cloud SDK: this
//! test reads the table with the SDK.

use vergence_aws::DynamoStore;
use vergence_aws::testing::{dynamodb_client, endpoint, unique_name};
use vergence_model::ports::TokenStore;
use vergence_testkit::workspace_binary;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_created_listed_and_revoked_in_the_deployment_table() {
    let Some(url) = endpoint("VERGENCE_TEST_DYNAMODB_URL") else {
        return;
    };
    let client = dynamodb_client(&url).await;
    let table = unique_name("vergence-tokens");
    DynamoStore::create_table(&client, &table).await.unwrap();
    let project = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let output = std::process::Command::new(workspace_binary("vergence"))
            .args(args)
            .args(["--dynamodb-table", &table])
            .current_dir(project.path())
            .env("AWS_ENDPOINT_URL_DYNAMODB", &url)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .env("AWS_REGION", "us-east-1")
            .env_remove("VERGENCE_ENDPOINT")
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
        String::from_utf8(output.stdout).unwrap()
    };
    let token = run(&["token", "create", "--app", "shop", "--scope", "release"]);
    let token = token.trim();
    let (id, secret) = vergence_model::split_token(token).unwrap();
    let store = DynamoStore::new(client, table.clone());
    let stored = store.get_token(id).await.unwrap().unwrap();
    assert_eq!(stored.secret_sha256, vergence_api::secret_sha256(secret));
    assert!(
        !format!("{stored:?}").contains(secret),
        "only the hash is stored"
    );
    assert!(run(&["token", "list", "--app", "shop"]).contains(id));
    run(&["token", "revoke", id]);
    assert_eq!(store.get_token(id).await.unwrap(), None);
    assert!(
        !project.path().join(".vergence").exists(),
        "nothing local was created"
    );
}
