//! The api Lambda: API Gateway HTTP API in front of the Vergence API router.

use vergence_lambda::{Deployment, api_router, init_logging};

#[tokio::main]
async fn main() -> Result<(), lambda_http::Error> {
    init_logging();
    let deployment = Deployment::from_env().await?;
    lambda_http::run(api_router(&deployment)).await
}
